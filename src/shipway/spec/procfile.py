"""A Procfile (``[app] procfile = "Procfile"``): the process types an app already declares
for Heroku, foreman or honcho, read instead of repeated in ``shipway.toml``.

Format, as Heroku reads it: one ``name: command`` per line; blank lines and ``#`` comments
are skipped. A command is run the way a Procfile runner runs it: words, with ``$PORT`` and
``${NAME}`` expanded from the process's environment; a command that needs a shell (pipes,
``&&``, redirections, ``VAR=value`` prefixes, globs) runs under ``sh -c`` as written. The
``release`` type is Heroku's release phase: it becomes the release command, not a process.

Problems are reported against the Procfile itself (its name and line), collected with the
spec's own, so one ``validate`` lists them all. The file is read by the spec layer's one
bounded reader (spec/limits.py): a FIFO or a 10 MB file named as the Procfile is refused.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from shipway.errors import SpecProblem
from shipway.spec.limits import MAX_SPEC_BYTES, Unreadable, read_regular_file, size_text

_LINE = re.compile(r"^([A-Za-z0-9_.-]+)\s*:\s*(.*)$")
#: what only a shell understands; such a command runs as ``sh -c LINE``
_NEEDS_SHELL = re.compile(r"[|&;<>()`*?]|^\s*[A-Za-z_][A-Za-z0-9_]*=|\$\(")
RELEASE = "release"  #: Heroku's release-phase process type


@dataclass(frozen=True)
class ProcfileEntry:
    name: str
    command: tuple[str, ...]
    line: int


@dataclass
class Procfile:
    """What a Procfile declares: process types in file order, the release command, and the
    problems found reading it (never raised: the spec's checker reports them with its own)."""

    file: str
    entries: dict[str, ProcfileEntry] = field(default_factory=dict)
    release: ProcfileEntry | None = None
    problems: list[SpecProblem] = field(default_factory=list)

    def error(self, line: int | None, path: str, message: str, hint: str = "") -> None:
        self.problems.append(SpecProblem(self.file, path, message, hint, line))


def command_words(text: str) -> tuple[str, ...]:
    """A Procfile command as the words shipway starts: ``sh -c TEXT`` when it needs a
    shell, else its words (raises ValueError on unbalanced quotes)."""
    if _NEEDS_SHELL.search(text):
        return ("sh", "-c", text)
    return tuple(shlex.split(text))


def read(name: str, base_dir: Path) -> Procfile:
    """Read the Procfile ``name`` (relative to the spec's directory)."""
    found = Procfile(file=name)
    path = base_dir / name
    try:
        raw = read_regular_file(path, MAX_SPEC_BYTES)
        text = raw.decode("utf-8")
    except Unreadable as exc:
        found.error(
            None,
            "app.procfile",
            f"{path} {exc}",
            f"a regular file of at most {size_text(MAX_SPEC_BYTES)}, or remove app.procfile",
        )
        return found
    except UnicodeDecodeError:
        found.error(None, "app.procfile", f"{path} is not UTF-8 text", "save it as UTF-8")
        return found
    for number, line in enumerate(text.splitlines(), start=1):
        _entry(found, number, line)
    if not found.entries and found.release is None:
        found.error(None, "app.procfile", f"{path} declares no process type", "add web: COMMAND")
    return found


def _entry(found: Procfile, number: int, line: str) -> None:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return
    m = _LINE.match(stripped)
    if m is None:
        found.error(number, "app.procfile", "is not a 'name: command' line", "e.g. web: app")
        return
    name, text = m.group(1), m.group(2).strip()
    path = f"processes.{name}"
    if not text:
        found.error(number, path, "has no command", f"{name}: COMMAND")
        return
    try:
        words = command_words(text)
    except ValueError as exc:
        found.error(number, path, f"cannot be split into words: {exc}", "check the quotes")
        return
    if name in found.entries or (name == RELEASE and found.release is not None):
        found.error(number, path, "is declared twice in the Procfile", "keep one line per type")
        return
    entry = ProcfileEntry(name=name, command=words, line=number)
    if name == RELEASE:
        found.release = entry
    else:
        found.entries[name] = entry
