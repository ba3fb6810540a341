"""Volumes on this machine: data written by one release is read by the next, after a
rollback, a blue-green switch, ``stop`` and ``deploy``; ``destroy`` keeps it unless told
``--volumes`` (and refuses without ``--confirm``). Real processes, real HTTP, the real CLI.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.backends.local.conftest import Slot, eventually

#: a web process that appends to data/notes.txt (GET /write?TEXT) and serves it (GET /)
NOTES_APP = r'''
import http.server, os, urllib.parse

RELEASE = os.environ.get("SHIPWAY_RELEASE", "dev")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/up":
            body = b"ok\n"
        elif url.path == "/write":
            with open("data/notes.txt", "a") as f:
                f.write(f"{url.query} by {RELEASE}\n")
            body = b"written\n"
        elif url.path == "/big":
            with open("data/big.bin", "wb") as f:
                f.write(os.urandom(256 * 1024))
            body = b"written\n"
        else:
            try:
                with open("data/notes.txt", "rb") as f:
                    body = f.read()
            except FileNotFoundError:
                body = b"(no notes)\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''

SPEC = """
[app]
name = "hello"

[processes.web]
command = "python3 notes.py"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 50

[env]
EDITION = "1"

[volumes.data]
path = "data"
"""


@pytest.fixture
def notes(slot: Slot) -> Slot:
    """The notes app, with its ``data`` volume, in the ``local`` slot."""
    (slot.app_dir / "notes.py").write_text(NOTES_APP)
    (slot.app_dir / "data").mkdir()
    (slot.app_dir / "data" / "notes.txt").write_text("a developer's own notes\n")
    slot.spec.write_text(SPEC)
    return slot


def volume_dir(slot: Slot) -> Path:
    return slot.state / "hello" / "local" / "volumes" / "data"


def write(slot: Slot, text: str) -> None:
    assert slot.get(f"/write?{text}") == (200, "written\n")


def notes_now(slot: Slot) -> str:
    status, body = slot.get("/")
    assert status == 200
    return body


def next_edition(slot: Slot) -> None:
    """A new release of the source (a changed env var)."""
    text = slot.spec.read_text()
    n = int(text.split('EDITION = "')[1].split('"')[0])
    slot.spec.write_text(text.replace(f'EDITION = "{n}"', f'EDITION = "{n + 1}"'))


def test_data_outlives_deploys_rollback_stop_and_destroy_without_volumes(notes: Slot) -> None:
    r = notes.deploy()
    assert "create volume/data" in r.out
    assert f"volume data: {volume_dir(notes)} (created)" in r.out
    # the source's own data/ is not the release's: the volume is placed there instead
    snap = notes.state / "hello" / "local" / "releases" / "r1"
    assert (snap / "data").is_symlink()
    assert os.readlink(snap / "data") == str(volume_dir(notes))
    assert notes_now(notes) == "(no notes)\n"
    write(notes, "one")

    next_edition(notes)
    r = notes.deploy()
    assert "rolled hello/local from r1 to r2" in r.out
    assert "volume/data" not in r.out.split("(made from")[0]  # nothing to do for it
    assert notes_now(notes) == "one by r1\n"  # r2 reads what r1 wrote
    write(notes, "two")

    r = notes.run("rollback", "local", "1")
    assert r.code == 0, r.text
    assert "remove volume" not in r.out
    assert notes_now(notes) == "one by r1\ntwo by r2\n"  # r1 again, with r2's data
    write(notes, "three")

    assert notes.run("stop", "local").code == 0
    assert volume_dir(notes).is_dir()
    notes.deploy()
    assert notes_now(notes) == "one by r1\ntwo by r2\nthree by r1\n"

    # destroy without --confirm: it lists what it would delete, then refuses (exit 3)
    r = notes.run("destroy", "local")
    assert r.code == 3, r.text
    assert "destroy hello/local deletes:" in r.out
    assert "release records" in r.out and "program/web@" in r.out
    assert f"= volume data ({volume_dir(notes)}" in r.out
    assert "confirm by passing --confirm local" in r.err
    assert notes_now(notes).endswith("three by r1\n")  # nothing was touched
    assert notes.run("destroy", "local", "--confirm", "staging").code == 3

    r = notes.run("destroy", "local", "--confirm", "local")
    assert r.code == 0, r.text
    assert "kept 1 volume(s)" in r.out
    base = notes.state / "hello" / "local"
    assert sorted(p.name for p in base.iterdir()) == ["volumes"]  # records, lock… all gone
    assert notes.history() == []
    assert not notes.supervisor().running()
    # a new first deploy finds the data again
    r = notes.deploy()
    assert "rolled hello/local from nothing to r1" in r.out
    assert notes_now(notes) == "one by r1\ntwo by r2\nthree by r1\n"


def test_destroy_with_volumes_deletes_the_data(notes: Slot) -> None:
    notes.deploy()
    write(notes, "doomed")
    r = notes.run("destroy", "local", "--volumes")
    assert r.code == 3 and "- volume data" in r.out and "(DATA)" in r.out
    assert (volume_dir(notes) / "notes.txt").is_file()  # refused: still there

    r = notes.run("destroy", "local", "--volumes", "--confirm", "local", "-o", "json")
    assert r.code == 0, r.text
    assert not (notes.state / "hello" / "local").exists()
    assert (notes.state / "ports.json").is_file()  # what other slots share stays
    notes.deploy()
    assert notes_now(notes) == "(no notes)\n"


def test_destroy_with_volumes_removes_a_symlinked_volume_as_a_link_only(
    notes: Slot, tmp_path: Path
) -> None:
    # the volume's data moved elsewhere (a bigger disk) and linked back into the slot
    notes.deploy()
    write(notes, "kept")
    elsewhere = tmp_path / "bigger-disk" / "data"
    elsewhere.parent.mkdir()
    volume_dir(notes).rename(elsewhere)
    volume_dir(notes).symlink_to(elsewhere)
    r = notes.run("destroy", "local", "--volumes", "--confirm", "local")
    assert r.code == 0, r.text
    assert f"removed volume data ({volume_dir(notes)}): a symlink to {elsewhere}" in r.out
    assert "the link only was removed" in r.out
    assert not (notes.state / "hello" / "local").exists()  # the whole slot went
    # what the link pointed to is outside the slot's directory: never deleted through it
    assert (elsewhere / "notes.txt").read_text() == "kept by r1\n"


def test_plan_and_status_list_the_volume_and_its_size_on_disk(notes: Slot) -> None:
    r = notes.run("plan", "local")
    assert r.code == 0, r.text
    assert f"volume data: {volume_dir(notes)}, not created yet" in r.out
    notes.deploy()
    assert notes.get("/big") == (200, "written\n")
    [volume] = notes.status()["volumes"]
    assert volume["name"] == "data" and volume["state"] == "present"
    assert volume["where"] == str(volume_dir(notes))
    assert volume["size_bytes"] >= 256 * 1024
    text = notes.run("status", "local").out
    assert f"volume data: {volume_dir(notes)}, present, 2" in text and "KiB on disk" in text
    next_edition(notes)
    assert "KiB on disk" in notes.run("plan", "local").out


def test_data_outlives_a_blue_green_switch(notes: Slot) -> None:
    notes.spec.write_text(SPEC + '\n[slots.local]\nstrategy = "blue-green"\nsleep_after = "0.3s"\n')
    notes.deploy()
    write(notes, "green")
    g1 = notes.json("gens", "local")["generations"][0]["name"]
    next_edition(notes)
    notes.deploy()
    gens = {g["name"]: g["state"] for g in notes.json("gens", "local")["generations"]}
    assert gens[g1] == "asleep" and len(gens) == 2
    assert notes_now(notes) == "green by r1\n"  # the new generation reads the old one's data
    write(notes, "blue")

    r = notes.run("switch", "local", g1)
    assert r.code == 0, r.text
    assert eventually(lambda: notes_now(notes) == "green by r1\nblue by r2\n", what="r1's reply")
    # gc of the asleep generation deletes its snapshot, never the data the link points at
    r = notes.run("gc", "local", "--keep", "0")
    assert r.code == 0, r.text
    assert (volume_dir(notes) / "notes.txt").read_text() == "green by r1\nblue by r2\n"


def test_a_volume_path_through_a_symlink_of_the_app_is_refused(notes: Slot, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (notes.app_dir / "var").symlink_to(outside)
    notes.spec.write_text(SPEC.replace('path = "data"', 'path = "var/data"'))
    r = notes.deploy(expect=12)
    assert "volume data: var/data leads through var, which is not a directory of the app" in r.out
    assert list(outside.iterdir()) == []  # nothing was placed outside the release


def test_a_volume_that_leaves_the_app_is_refused_before_anything_is_touched(notes: Slot) -> None:
    notes.spec.write_text(SPEC.replace('path = "data"', 'path = "../data"'))
    r = notes.run("deploy", "local")
    assert r.code == 2
    assert "volumes.data.path: '../data' leaves the app's directory" in r.err
    assert not notes.state.exists()
