"""Driving a command through a pseudo-terminal in tests: what an interactive user sees."""

from __future__ import annotations

import os
import select
import time


def read_until(fd: int, wanted: bytes, seen: bytes = b"", timeout: float = 60.0) -> bytes:
    """Read the terminal's side ``fd`` until ``wanted`` has appeared; everything read."""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {wanted!r} in {seen!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the other side closed
                chunk = b""
            assert chunk, f"the terminal closed before {wanted!r}: {seen!r}"
            seen += chunk
    return seen
