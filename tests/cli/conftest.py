"""Helpers for the command line's tests: an app directory deployed on the local backend
(real processes, real HTTP on loopback), and a pseudo-terminal to run shipway on."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.backends.local.conftest import HELLO, Slot, free_port

#: a spec with two slots (so SLOT may not be left out), state kept in ``{state}``
TWO_SLOTS = """
[app]
name = "shop"
[processes.web]
command = "serve"
port = 8000
[processes.worker]
command = "work"
[slots.test1]
state_dir = "{state}"
[slots.prod]
role = "production"
state_dir = "{state}"
"""


def local_slot(app_dir: Path, state: Path) -> Slot:
    """``app_dir`` run by the local backend with its own state dir and router port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIPWAY_", "XDG_STATE"))}
    env.pop("NO_COLOR", None)
    port = free_port()
    env.update(SHIPWAY_STATE_DIR=str(state), SHIPWAY_ROUTER_PORT=str(port), PYTHONUNBUFFERED="1")
    return Slot(app_dir=app_dir, state=state, port=port, env=env)


@pytest.fixture
def local_app(tmp_path: Path) -> Iterator[Callable[[Path], Slot]]:
    """Makes a local slot for an app directory; every supervisord is shut down after."""
    made: list[Slot] = []

    def make(app_dir: Path) -> Slot:
        s = local_slot(app_dir, tmp_path / f"state{len(made)}")
        made.append(s)
        return s

    yield make
    for s in made:
        for p in s.spawned:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
        s.supervisor().shutdown()


@pytest.fixture
def hello(tmp_path: Path, local_app: Callable[[Path], Slot]) -> Slot:
    """The hello example (no [slots]: one implicit ``local`` slot)."""
    app_dir = tmp_path / "hello"
    shutil.copytree(HELLO, app_dir, ignore=shutil.ignore_patterns("__pycache__"))
    return local_app(app_dir)


def on_tty(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    timeout: float = 120,
    columns: int = 100,
) -> tuple[int, str, list[tuple[float, str]]]:
    """Run ``argv`` on a pseudo-terminal: its exit code, everything it wrote, and the
    chunks it wrote with the time each arrived (seconds since the start)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, stdin=follower, stdout=follower, stderr=follower, cwd=cwd, env=env,
        close_fds=True,
    )  # fmt: skip
    os.close(follower)
    chunks: list[tuple[float, str]] = []
    deadline = start + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append((time.monotonic() - start, chunk.decode(errors="replace")))
        elif proc.poll() is not None:
            break
    if proc.poll() is None:
        proc.kill()
    code = proc.wait(timeout=30)
    os.close(leader)
    return code, "".join(c for _, c in chunks), chunks


def shipway(*args: str) -> list[str]:
    return [sys.executable, "-m", "shipway", *args]
