"""A full disk under the state directory: the deploy says which file it could not write,
exits 7 (documented), the previous release keeps serving, and once there is space again the
next deploy goes through. On a real (small) tmpfs, filled for the test."""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.local.conftest import Slot


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of the test's own (root only), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> Path:
    """Write zeros into ``path`` until the disk holding it is full."""
    chunk = b"\0" * (1 << 16)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    return path


def on_disk(slot: Slot, disk: Path) -> None:
    """The slot keeps its state on ``disk``; r1 deployed there."""
    slot.state = disk / "state"
    slot.env["SHIPWAY_STATE_DIR"] = str(slot.state)
    slot.deploy()


def test_a_full_disk_names_the_file_exits_7_and_the_previous_release_serves(
    disk: Path, slot: Slot
) -> None:
    on_disk(slot, disk)
    assert slot.get("/") == (200, "hello from r1\n")

    filler = fill(disk / "filler")
    slot.edit_spec('GREETING = "hello"', 'GREETING = "two"')
    r = slot.run("deploy", "local")
    assert r.code == 7, r.text
    assert "unexpected error" not in r.text and "Traceback" not in r.text
    assert f"cannot write {slot.state}/" in r.text, r.text
    assert "No space left on device (hint: the disk holding it is full" in r.text
    assert slot.get("/") == (200, "hello from r1\n")  # the previous release serves
    assert "7   a file shipway keeps could not be written" in slot.run("--help").out

    filler.unlink()  # space again: nothing is stuck
    r = slot.deploy()
    assert slot.get("/") in ((200, "two from r2\n"), (200, "two from r3\n")), r.text


def test_a_snapshot_the_disk_cannot_hold_fails_the_step_naming_its_file(
    disk: Path, slot: Slot
) -> None:
    on_disk(slot, disk)
    (slot.app_dir / "data.bin").write_bytes(os.urandom(4 << 20))  # the next snapshot: 4 MiB
    filler = fill(disk / "filler")
    os.truncate(filler, filler.stat().st_size - (512 << 10))  # room for records, not for it
    r = slot.run("deploy", "local")
    assert r.code == 10, r.text  # rolled back: the step failed, r1 serves again
    assert f"cannot write {slot.state}/hello/local/releases/" in r.text, r.text
    assert "data.bin: No space left on device" in r.text
    assert "unexpected error" not in r.text and "Traceback" not in r.text
    assert slot.get("/") == (200, "hello from r1\n")
