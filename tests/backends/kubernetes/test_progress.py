"""Live progress per process: redrawn in place on a terminal, plain lines otherwise."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from tests.backends.kubernetes.conftest import BASE_ENV, Slot

pytestmark = pytest.mark.k8s


def on_tty(slot: Slot, *args: str) -> tuple[int, str]:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "shipway", "-f", str(slot.spec_file), *args],
        stdin=follower, stdout=follower, stderr=follower, close_fds=True,
        env={**os.environ, **BASE_ENV, "KUBECONFIG": str(slot.kubeconfig)},
    )  # fmt: skip
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 120
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
        elif proc.poll() is not None:
            break
    code = proc.wait(timeout=30)
    os.close(leader)
    return code, seen.decode(errors="replace")


def test_progress_is_redrawn_in_place_on_a_terminal(slot: Slot) -> None:
    slot.write()
    code, out = on_tty(slot, "deploy", "test1")
    assert code == 0, out
    # the counts line of a process is rewritten in place (carriage return, erase line)
    assert "\r\x1b[2K  web: desired 2 updated 2 ready 2 available 2" in out
    assert "rolled shop/test1 from nothing to r1" in out


def test_progress_is_plain_lines_otherwise(slot: Slot) -> None:
    slot.write()
    result = slot.cli("deploy", "test1")
    assert result.returncode == 0
    assert "\x1b[" not in result.stdout
    assert "  web: desired 2 updated 2 ready 2 available 2\n" in result.stdout
