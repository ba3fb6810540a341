"""Reading process logs: the last lines of a file, and following a changing set of files.

The set of files is a function, called again every second while following, so a redeploy's
new programs are picked up. Lines pass through ``redact`` (secret values masked) before
anyone sees them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

Sources = Callable[[], list[tuple[str, Path]]]


def tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of a file (reading at most its last 64 KiB)."""
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace")
    except OSError:
        return []
    return data.splitlines()[-lines:]


def stream(
    sources: Sources, follow: bool, lines: int, redact: Callable[[str], str]
) -> Iterator[str]:
    """``label | line`` for the last ``lines`` of each source; with ``follow``, then every
    new line as it is written, until the caller stops iterating."""
    offsets: dict[Path, int] = {}
    for label, path in sources():
        for line in tail(path, lines):
            yield f"{label} | {redact(line)}"
        with contextlib.suppress(OSError):
            offsets[path] = path.stat().st_size
    if not follow:
        return
    partial: dict[Path, str] = {}
    last_scan = time.monotonic()
    current = sources()
    while True:
        if time.monotonic() - last_scan > 1.0:
            current, last_scan = sources(), time.monotonic()
        quiet = True
        for label, path in current:
            try:
                size = path.stat().st_size
            except OSError:
                continue
            start = offsets.get(path, 0)
            if size < start:  # rotated
                start = 0
            if size == start:
                continue
            with open(path, "rb") as f:
                f.seek(start)
                chunk = f.read(size - start).decode(errors="replace")
            offsets[path] = size
            text = partial.pop(path, "") + chunk
            *complete, rest = text.split("\n")
            if rest:
                partial[path] = rest
            for line in complete:
                quiet = False
                yield f"{label} | {redact(line)}"
        if quiet:
            time.sleep(0.2)
