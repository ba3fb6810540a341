"""The slot lock: an flock the kernel drops when its holder dies, with the holder inside."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from shipway.backends.local import LocalBackend
from shipway.backends.local.dirs import SlotDirs
from shipway.backends.local.health import health_gate
from shipway.backends.local.lock import slot_lock
from shipway.backends.local.records import Instance, ProgramRecord
from shipway.backends.local.render import HealthCheck
from shipway.backends.local.supervisor import Supervisor
from shipway.backends.protocol import Failure, LockHolder
from shipway.errors import LockLost, SlotLocked
from shipway.guard import Guard
from shipway.plan.model import Remove
from tests.backends.local.conftest import free_port
from tests.conftest import app_from_toml


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)

    def progress(self, process: str, counts: object, note: str = "") -> None:
        pass


def test_second_taker_is_refused_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    me = LockHolder.me()
    with slot_lock(path, "local", me, Lines()):
        with pytest.raises(SlotLocked) as err, slot_lock(path, "local", LockHolder.me(), Lines()):
            pass
        assert me.holder in str(err.value)
        assert f"pid {os.getpid()}" in str(err.value)
        assert err.value.exit_code == 4
    # released on exit: free again, and nothing left behind to "break"
    lines = Lines()
    with slot_lock(path, "local", me, lines):
        pass
    assert lines.lines == []
    assert path.read_text() == ""


def test_a_lock_left_by_a_dead_holder_is_broken_with_a_line(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    dead = {"holder": "ci@builder (pid 999999)", "host": "builder", "pid": 999999,
            "since": "2026-01-01T00:00:00+00:00", "ttl": 60}
    path.write_text(json.dumps(dead))
    lines = Lines()
    with slot_lock(path, "local", LockHolder.me(), lines):
        held = json.loads(path.read_text())
        assert held["pid"] == os.getpid()
    assert len(lines.lines) == 1
    assert "broke the lock" in lines.lines[0]
    assert "ci@builder (pid 999999)" in lines.lines[0]
    assert "no longer running" in lines.lines[0]


SPEC = """
[app]
name = "shop"
[processes.web]
command = "python3 -c 'import time; time.sleep(60)'"
[slots.local]
backend = "local"
"""


def test_a_lock_file_deleted_or_replaced_under_a_holder_stops_its_next_mutation(
    tmp_path: Path,
) -> None:
    app = app_from_toml(SPEC + f'state_dir = "{tmp_path / "state"}"\n', tmp_path)
    backend = LocalBackend(app, app.slots.get("local"), environ={})
    target = app.slots.target("local")
    clearance = Guard(app.slots).clear("local")
    base = tmp_path / "state" / "shop" / "local"
    forget_snapshot = Remove(unit="snapshot", kind="snapshot", reason="test")
    with backend.lock(clearance, target, LockHolder.me(), Lines()):
        (base / "snapshot.json").write_text("{}")
        (base / "lock").unlink()
        lost = r"lost the lock on shop/local: its lock file \S+ was deleted"
        with pytest.raises(LockLost, match=lost):
            backend.remove(clearance, target, forget_snapshot, Lines())
        assert (base / "snapshot.json").exists()  # nothing was touched
        # another deploy takes a new lock file at that path: this holder's is not it
        with (
            slot_lock(base / "lock", "local", LockHolder.me(), Lines()),
            pytest.raises(LockLost, match="was replaced by another file"),
        ):
            backend.write_records(clearance, target, [])
        assert not (base / "records.json.gz").exists()
    # held again and kept: mutations go on
    with backend.lock(clearance, target, LockHolder.me(), Lines()):
        backend.remove(clearance, target, forget_snapshot, Lines())
    assert not (base / "snapshot.json").exists()


def test_the_health_gate_stops_waiting_once_the_lock_is_lost(tmp_path: Path) -> None:
    rec = ProgramRecord(
        unit="u",
        process="web",
        deployment_id="d1",
        release="r1",
        snapshot=tmp_path,
        snapshot_digest="sha256:0",
        health=HealthCheck.of(None),
        instances=(Instance.new(SlotDirs(tmp_path, "shop", "local"), "sw.shop.local.web.d1",
                                "web", "d1", 0, free_port()),),
        created_at="",
    )

    def lost() -> None:
        raise LockLost("lost the lock on shop/local: its lock file was deleted")

    never = Supervisor(tmp_path / "supervisor")  # not running: would be "ABSENT" at once
    with pytest.raises(LockLost):
        health_gate(never, rec, time.monotonic() + 30, Lines(), _no_failure, lost)


def _no_failure(inst: Instance, reason: str, message: str, code: int | None) -> Failure:
    raise AssertionError(f"the gate judged {inst.name} ({reason}: {message}) after the loss")
