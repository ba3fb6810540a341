"""Reading process logs: the last lines of a file, following a changing set of files, and
a running command's output as it comes (:func:`output`).

Each line of a program's log starts with the time it was written (the launcher's stamper,
launch.py): :func:`parse` splits it off, so a line shows with or without it, and ``--since``
can select by it. Lines written without one (a release command's log, a log from before
stamping) have no time, and are never dropped by ``--since``.

The set of files is a function, called again every second while following, so a redeploy's
new programs are picked up. Lines pass through ``redact`` (secret values masked) before
anyone sees them.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from shipway.backends.logs import LogLine

Sources = Callable[[], list[tuple[str, Path]]]

#: the stamp launch.py writes at the start of each line: UTC, to the millisecond
STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (.*)$", re.DOTALL)
#: how much of a log's end is read for its last lines
TAIL_BYTES = 256 * 1024


def parse(raw: str) -> tuple[float | None, str]:
    """A log line's time (None when it has no stamp) and its text."""
    m = STAMPED.match(raw)
    if m is None:
        return None, raw
    at = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC)
    return at.timestamp(), m.group(2)


def read_lines(path: Path, limit: int = TAIL_BYTES) -> list[tuple[float | None, str]]:
    """The lines of the last ``limit`` bytes of a file (a first, cut line left out)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read().decode(errors="replace")
    except OSError:
        return []
    lines = data.splitlines()
    if size > limit and lines:
        lines = lines[1:]
    return [parse(line) for line in lines]


def tail(path: Path, lines: int) -> list[str]:
    """The texts of the last ``lines`` lines of a file, stamps left off."""
    if lines <= 0:
        return []
    return [text for _, text in read_lines(path)[-lines:]]


def last_lines(
    sources: list[tuple[str, Path]], lines: int, since: float | None, redact: Callable[[str], str]
) -> list[LogLine]:
    """The last ``lines`` lines of all sources together, written at or after ``since``,
    interleaved by time (a line without a time keeps its place after the one before it)."""
    if lines <= 0:
        return []
    found: list[tuple[float, int, LogLine]] = []
    order = 0
    for label, path in sources:
        when = 0.0
        for at, text in read_lines(path):
            when = at if at is not None else when
            if since is None or at is None or at >= since:
                found.append((when, order, LogLine(label, at, text)))
            order += 1
    found.sort(key=lambda item: (item[0], item[1]))
    return [LogLine(line.source, line.at, redact(line.text)) for _, _, line in found[-lines:]]


def follow(sources: Sources, redact: Callable[[str], str]) -> Iterator[LogLine]:
    """Every line written to the sources from now on, as it is written, until the caller
    stops iterating."""
    offsets: dict[Path, int] = {}
    for _, path in sources():
        with contextlib.suppress(OSError):
            offsets[path] = path.stat().st_size
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
            for raw in complete:
                quiet = False
                at, line = parse(raw)
                yield LogLine(label, at, redact(line))
        if quiet:
            time.sleep(0.2)


def output(proc: subprocess.Popen[bytes], deadline: float) -> Iterator[bytes]:
    """What ``proc`` writes to its stdout pipe, chunk by chunk as it comes, until it has
    exited and all it wrote is read — or until ``deadline`` (``time.monotonic()``), when
    it may still run (the caller asks ``proc.poll()``).

    Whether it has exited is asked before each read, never after one: a process may write
    its last lines and exit between a read that found nothing and the question, and those
    lines (often the error) would be lost."""
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    while True:
        exited = proc.poll() is not None  # then all it wrote is in the pipe already
        chunk = proc.stdout.read()
        if chunk:
            yield chunk
        elif exited:
            return
        else:
            time.sleep(0.05)
        if time.monotonic() > deadline:
            return


def lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of ``chunks`` (newlines left off), the last one even without its newline."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        yield from complete
    if buffer:
        yield buffer
