"""On a terminal, a guarded slot asks for its name; typing anything else is refused."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

SPEC = """
[app]
name = "shop"
[processes.web]
command = "serve"
port = 8000
[slots.prod]
role = "production"
state_dir = "{state}"
"""


def run_on_tty(args: list[str], answer: str, cwd: Path) -> tuple[int, str]:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "shipway", *args],
        stdin=follower, stdout=follower, stderr=follower, cwd=cwd, close_fds=True,
        env={**os.environ, "SHIPWAY_STATE_DIR": str(cwd / "state")},
    )  # fmt: skip
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 30
    answered = False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        if not answered and b"type its name to confirm" in seen:
            os.write(leader, answer.encode() + b"\r")
            answered = True
        if proc.poll() is not None and not ready:
            break
    code = proc.wait(timeout=30)
    os.close(leader)
    return code, seen.decode(errors="replace")


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "shipway.toml").write_text(SPEC.format(state=tmp_path / "state"))
    return tmp_path


def test_typing_another_name_is_refused(app_dir: Path) -> None:
    code, out = run_on_tty(["deploy", "prod"], "staging", app_dir)
    assert "type its name to confirm" in out
    assert code == 3
    assert "does not match slot 'prod'" in out


def test_typing_the_slot_name_passes_the_guard(app_dir: Path) -> None:
    code, out = run_on_tty(["restart", "prod", "web"], "prod", app_dir)
    assert "type its name to confirm" in out
    # past the guard, the engine itself answers: there is nothing to restart yet
    assert code == 2
    assert "nothing is deployed in slot 'prod'" in out
