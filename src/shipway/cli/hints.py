"""Commands shipway suggests are commands the user can paste as they are: when the spec was
given with ``-f FILE``, every ``shipway <command> …`` in what shipway prints gets that same
``-f FILE`` (a hint without it would read ./shipway.toml, another app or none). And ``-f``
given after the command (``shipway plan local -f app``, where it is no option of the
command) is refused with the line that works: ``-f`` belongs before the command.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence

_given: str | None = None
_pattern: re.Pattern[str] | None = None


def remember(spec_file: str | None, commands: Iterable[str]) -> None:
    """The spec file the user typed (None: none, or only from SHIPWAY_FILE, which a pasted
    command gets again), and the command names a hint may start with."""
    global _given, _pattern
    _given = spec_file
    names = "|".join(sorted((re.escape(c) for c in commands), key=len, reverse=True))
    _pattern = re.compile(rf"\bshipway (?=(?:{names})(?:[ `'\")]|$))", re.M) if names else None


def pasteable(text: str) -> str:
    """``text`` with ``-f FILE`` put into every ``shipway <command>`` it suggests."""
    if not _given or _pattern is None:
        return text
    return _pattern.sub(f"shipway -f {shlex.quote(_given)} ", text)


def file_after_command(argv: Sequence[str], command: str) -> str:
    """The hint for ``-f`` given after ``command``: the same line with ``-f FILE`` first."""
    words = list(argv)
    value = "FILE"
    for i, word in enumerate(words):
        if word in ("-f", "--file") and i + 1 < len(words):
            value = words[i + 1]
            del words[i : i + 2]
            break
        if word.startswith("--file="):
            value = word.split("=", 1)[1]
            del words[i]
            break
    rest = words[words.index(command) + 1 :] if command in words else ["…"]
    line = shlex.join(["shipway", "-f", value, command, *rest])
    return f"-f goes before the command (hint: {line})"
