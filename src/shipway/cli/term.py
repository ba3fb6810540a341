"""What the terminal gets: colour only on a terminal that wants it, widths that fit.

Colour (and the live, redrawn progress of cli/live.py) is for a person at a terminal: never
when the output is piped or redirected, never with ``NO_COLOR`` set to anything non-empty
(no-color.org), never on ``TERM=dumb``. Everything here is cheap to import: ``--help``
must stay fast, so rich is imported only by cli/live.py, when a live view is shown.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any, TextIO

import click

#: the colours of the words shipway shows, by what they mean
STYLES: dict[str, dict[str, Any]] = {
    "ok": {"fg": "green"},
    "warn": {"fg": "yellow"},
    "bad": {"fg": "red", "bold": True},
    "dim": {"dim": True},
    "name": {"bold": True},
}
#: a state or outcome word → its style
MEANING = {
    "rolled": "ok",
    "running": "ok",
    "deployed": "ok",
    "live": "ok",
    "healthy": "ok",
    "rolled-back": "warn",
    "deploying": "warn",
    "pending": "warn",
    "stopped": "dim",
    "superseded": "dim",
    "asleep": "dim",
    "awake": "warn",
    "failed": "bad",
    "rollback-failed": "bad",
    "no-anchor": "bad",
    "unhealthy": "bad",
}
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DIGEST = re.compile(r"(sha256:)([0-9a-f]{12})[0-9a-f]{52}")


def colour_on(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that takes colour and redrawn lines."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def paint(text: str, role: str, on: bool) -> str:
    """``text`` in the colour of ``role`` (a STYLES key, or a MEANING word) when ``on``."""
    style = STYLES.get(role) or STYLES.get(MEANING.get(role, ""))
    return click.style(text, **style) if on and style else text


def plain(text: str) -> str:
    """``text`` without colour codes."""
    return _ANSI.sub("", text)


def short_digests(text: str) -> str:
    """Every ``sha256:<64 hex>`` shortened to its first 12 digits, as docker ps does."""
    return _DIGEST.sub(r"\1\2", text)


def width(stream: TextIO) -> int | None:
    """The columns a table may use: the terminal's (or ``COLUMNS``); None when the output
    is not a terminal and ``COLUMNS`` is not set (a file or a pipe gets whole lines)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size((100, 24)).columns
