"""The slot lock: an flock the kernel drops when its holder dies, with the holder inside."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shipway.backends.local.lock import slot_lock
from shipway.backends.protocol import LockHolder
from shipway.errors import SlotLocked


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
