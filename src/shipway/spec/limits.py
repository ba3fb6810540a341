"""The limits on what the spec layer reads, and the one reader that holds to them.

A spec is a small hand-written text file. Whatever a hostile or mistaken file holds (a
FIFO, ``/dev/zero``, a 10 MB log, a YAML alias bomb, 10,000 nested brackets, a number of
5,000 digits), loading it must end within a second in a clear error naming the file, with
exit code 2: never a hang, a traceback, or memory growing without bound. The numbers here
are documented in README.md ("Limits"); change both together.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shipway.spec.locate import KeyPath

# A hand-written spec is a few KiB; file contents beyond this belong in the app's source.
MAX_SPEC_BYTES = 256 * 1024
# A secret file (from_file): a token, a key, a certificate chain.
MAX_SECRET_FILE_BYTES = 1024 * 1024
# Tables and lists inside one another, the file's own counted (slots.prod.routes[0]: 5).
MAX_DEPTH = 32
# Keys, values, tables and lists in one spec, counted after YAML aliases are expanded
# (a real spec has a few hundred; an alias bomb of 342 bytes expands to a billion).
MAX_VALUES = 10_000

MINUTE, HOUR = 60.0, 3600.0
# The longest each duration may be, in seconds: a deploy waits through these.
MAX_DURATION: Mapping[str, float] = {
    "interval": 5 * MINUTE,
    "timeout": 5 * MINUTE,
    "initial_delay": HOUR,
    "sleep_after": HOUR,
    "drain_timeout": HOUR,
    "release_timeout": 6 * HOUR,
    "build_timeout": 6 * HOUR,
    "step_time": HOUR,
    "canary_timeout": 6 * HOUR,
    "answer_timeout": 10 * MINUTE,
}
# A health gate probes for at most initial_delay + attempts * interval.
MAX_HEALTH_GATE = HOUR
# (lowest, highest) of each count.
COUNTS: Mapping[str, tuple[int, int]] = {
    "port": (1, 65535),
    "replicas": (0, 1000),
    "attempts": (1, 10_000),
    "history_limit": (1, 1000),
    "batch": (1, 1000),
}

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class Unreadable(Exception):
    """A file the spec layer refuses to read; the message says why, without its content."""


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes.

    Its type is checked before it is opened (a device is never opened) and again on the
    open descriptor (no race with a swap); it is opened non-blocking, so a FIFO swapped in
    cannot hold the open; at most ``limit + 1`` bytes are ever read, so a growing file cannot
    exhaust memory. Raises :class:`Unreadable`.
    """
    try:
        _require_regular(os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise Unreadable(os_reason(exc)) from exc
    try:
        _require_regular(os.fstat(fd).st_mode)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise Unreadable(os_reason(exc)) from exc
    finally:
        os.close(fd)
    if size > limit:
        raise Unreadable(f"is larger than {size_text(limit)}")
    return b"".join(chunks)


def _require_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")
        raise Unreadable(f"is {kind}, not a regular file")


def os_reason(exc: OSError) -> str:
    """Why a path cannot be read, in words (the errno names mean little to a user)."""
    if exc.errno == errno.ELOOP:
        return "is a symlink loop (or has too many levels of symbolic links)"
    if exc.errno == errno.ENOTDIR:
        return "cannot be read: a part of the path is not a directory"
    if exc.errno == errno.ENOENT:
        return "does not exist"
    return f"cannot be read: {exc.strerror or exc}"


def size_text(n: int) -> str:
    for unit, size in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def shape_problem(data: Any) -> tuple[KeyPath, str, str] | None:
    """Where parsed data is too deep, too large, or holds a NUL character, as (key path,
    message, hint), or None. Iterative: a value nested far beyond the limit is refused
    without recursing into it."""
    count = 0
    stack: list[tuple[Any, KeyPath]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        count += 1
        if isinstance(value, str) and "\x00" in value:
            return path, "holds a NUL character (\\u0000)", NUL_HINT
        if not isinstance(value, dict | list):
            continue
        if len(path) >= MAX_DEPTH:
            return path, TOO_DEEP, DEPTH_HINT
        if count + len(stack) + len(value) * (2 if isinstance(value, dict) else 1) > MAX_VALUES:
            return path, TOO_MANY, SIZE_HINT
        if isinstance(value, dict):
            for key, child in value.items():
                if isinstance(key, str) and "\x00" in key:
                    return path, "a key holds a NUL character (\\u0000)", NUL_HINT
                stack.append((child, (*path, key)))
        else:
            stack.extend((child, (*path, i)) for i, child in enumerate(value))
    return None


TOO_DEEP = f"tables and lists are nested more than {MAX_DEPTH} deep"
TOO_MANY = f"holds more than {MAX_VALUES:,} keys and values"
DEPTH_HINT = "a spec is a few tables deep: is this the right file?"
SIZE_HINT = "a spec declares an app, not data: is this the right file?"
NUL_HINT = "no program, path or variable can hold one: remove it"
