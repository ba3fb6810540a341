"""Finding and reading a spec file (``shipway.toml``; YAML accepted too).

Only a regular file is read, never more than ``MAX_SPEC_BYTES`` of it (spec/limits.py):
a FIFO, a device, a directory or a symlink loop given as the spec is an InputError naming
it, at once; what its text holds is judged by spec/syntax.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from shipway.errors import InputError
from shipway.spec.limits import (
    MAX_SPEC_BYTES,
    Unreadable,
    os_reason,
    read_regular_file,
    size_text,
)
from shipway.spec.locate import Locator
from shipway.spec.model import App
from shipway.spec.parse import parse
from shipway.spec.syntax import decode, parse_toml, parse_yaml

CANDIDATES = ("shipway.toml", "shipway.yaml", "shipway.yml")
_HINT = "hint: pass -f PATH to a shipway.toml"


def find(path: str | Path | None = None, cwd: Path | None = None) -> Path:
    """The spec at ``path``, else the first of shipway.toml/.yaml/.yml in ``cwd``."""
    if path is not None:
        p = Path(path)
        try:
            if not p.is_dir():
                p.stat()  # is_dir() hides why a path is unusable; stat() says it
                return p
        except OSError as exc:
            raise InputError(f"{p}: {os_reason(exc)} ({_HINT})") from exc
        cwd = p
    here = cwd or Path.cwd()
    for name in CANDIDATES:
        # Any entry by that name, even a FIFO or a dangling link: read() says what is wrong.
        if os.path.lexists(here / name):
            return here / name
    raise InputError(
        f"no shipway.toml in {here} (hint: run in the app's directory, or pass -f PATH)"
    )


def read(path: Path) -> tuple[Any, Locator]:
    """Raw data and a line locator; every problem with the file or its text is an
    InputError (SpecInvalid, with its line, for the text) naming the file."""
    try:
        raw = read_regular_file(path, MAX_SPEC_BYTES)
    except Unreadable as exc:
        raise InputError(
            f"{path}: {exc} ({_HINT}: a regular file of at most {size_text(MAX_SPEC_BYTES)})"
        ) from exc
    text = decode(raw, str(path))
    if path.suffix in (".yaml", ".yml"):
        return parse_yaml(text, str(path))
    return parse_toml(text, str(path))


def load(path: str | Path | None = None) -> App:
    """Find, read and validate a spec. Raises SpecInvalid listing every problem."""
    spec = find(path)
    data, locate = read(spec)
    return parse(data, file=spec.name, locate=locate, base_dir=spec.parent.resolve())
