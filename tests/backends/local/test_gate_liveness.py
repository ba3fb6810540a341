"""An uptime gate counts a process as started only when it has started: alive (never an
exited child supervisord has not reaped yet, which it may still call RUNNING under load),
and waiting for something or busy for a while (never one that sat unscheduled through the
gate's window on a loaded machine — here a stopped one stands for it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from shipway.backends.local.health import BUSY_CPU_SECONDS, settled, still_running


@pytest.fixture
def waiting() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    yield child
    child.kill()
    child.wait()


def _until(condition: object, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.02)
    return False


def test_a_waiting_process_has_started_and_an_unreaped_or_gone_one_has_not(
    waiting: subprocess.Popen[bytes],
) -> None:
    info = {"pid": waiting.pid, "statename": "RUNNING"}
    assert _until(lambda: settled(info)), "a process blocked on its stdin is waiting"
    assert still_running(info)
    assert waiting.stdin is not None
    waiting.stdin.close()  # it exits; nothing reaps it yet: a zombie
    os.waitid(os.P_PID, waiting.pid, os.WEXITED | os.WNOWAIT)  # wait, keeping the zombie
    assert not still_running(info) and not settled(info)
    waiting.wait()
    assert not still_running(info) and not settled(info)  # reaped: gone
    assert not settled({"pid": 0}) and not settled(None)


def test_a_process_that_never_ran_has_not_started_and_a_busy_one_has() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.kill(busy.pid, signal.SIGSTOP)  # alive, never scheduled: as under heavy load
        assert still_running({"pid": busy.pid})
        assert not settled({"pid": busy.pid})
        os.kill(busy.pid, signal.SIGCONT)
        assert _until(lambda: settled({"pid": busy.pid})), f"busy for {BUSY_CPU_SECONDS}s CPU"
    finally:
        busy.kill()
        busy.wait()
