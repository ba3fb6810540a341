"""``status`` says what the slot is doing — running, deploying (held by …), failed rN,
stopped — and its columns never shift when a value is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from tests import cliproc
from tests.backends.local.conftest import Slot, eventually
from tests.cli.conftest import shipway


def first_lines(slot: Slot) -> list[str]:
    r = slot.run("status")
    assert r.code == 0, r.text
    return r.out.splitlines()


def test_status_says_running_failed_deploying_and_stopped(hello: Slot) -> None:
    assert first_lines(hello)[0] == "hello/local (local): nothing deployed"
    hello.deploy()
    lines = first_lines(hello)
    assert lines[0] == "hello/local (local): running"
    assert lines[1].startswith("  running r1, deployed ")

    failing = hello.app_dir / "shipway-failing.toml"
    assert hello.run("deploy", spec=failing).code == 10  # rolled back to r1
    lines = first_lines(hello)
    assert lines[0] == "hello/local (local): failed r2"
    assert lines[1].startswith("  failed r2 (") and lines[1].endswith("; r1 serves")
    assert hello.json("status")["state"] == "failed r2"

    # a deploy in progress: the slot is held, and by whom (its health gate fails for about
    # 15 s, so two status commands fit in the deploy even on a loaded machine)
    hello.edit_spec("attempts = 25", "attempts = 75", spec=failing)
    slow = hello.spawn("deploy", spec=failing)
    held = eventually(
        lambda: next((line for line in first_lines(hello) if "deploying r3" in line), None),
        what="status to show the deploy in progress",
    )
    assert "(held by " in held and "; r1 is the deployed release" in held
    assert hello.json("status")["held_by"]
    assert slow.wait(timeout=120) == 10

    assert hello.run("stop").code == 0
    lines = first_lines(hello)
    assert lines[0] == "hello/local (local): stopped"
    assert "r1 is the deployed release, nothing of it runs" in lines[1]


def test_status_columns_never_shift_when_a_value_is_missing(hello: Slot) -> None:
    hello.deploy()
    table = first_lines(hello)[2:]
    header = table[0].split()
    assert "URL" in header  # web has one, worker has none
    for row in table[1:]:
        assert len(row.split()) == len(header), row  # "-" stands in for what is missing
    worker = next(row for row in table if row.startswith("worker"))
    assert worker.split()[header.index("URL")] == "-"


def test_ls_lists_every_app_and_slot_of_the_state_dir_without_a_spec(
    hello: Slot, tmp_path: Path
) -> None:
    hello.deploy()
    other = tmp_path / "other"
    shutil.copytree(hello.app_dir, other)
    text = (other / "shipway.toml").read_text().replace('name = "hello"', 'name = "other"')
    (other / "shipway.toml").write_text(text + "\n[slots.staging]\n")
    second = replace(hello, app_dir=other)
    assert second.run("deploy", "staging").code == 0
    assert second.run("stop", "staging").code == 0

    nowhere = tmp_path / "nowhere"  # no spec here: ls reads the records only
    nowhere.mkdir()

    def ls(*args: str) -> subprocess.CompletedProcess[str]:
        return cliproc.run(
            shipway("ls", *args), env=hello.env, cwd=nowhere, capture_output=True, text=True,
            check=False,
        )  # fmt: skip

    r = ls()
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert rows[0] == ["APP", "SLOT", "STATE", "RELEASE", "READY", "DEPLOYED", "URL"]
    assert rows[1][:5] == ["hello", "local", "running", "r1", "2/2"]
    assert rows[1][6] == f"http://hello.localhost:{hello.port}"
    assert rows[2][:5] == ["other", "staging", "stopped", "r1", "-"]
    doc = json.loads(ls("-o", "json").stdout)
    assert [(s["app"], s["slot"], s["state"]) for s in doc["slots"]] == [
        ("hello", "local", "running"),
        ("other", "staging", "stopped"),
    ]
