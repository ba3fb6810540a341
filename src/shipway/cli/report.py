"""Rendering for the command line: progress while working, results as text or JSON.

In JSON mode stdout carries exactly one JSON document; progress goes to stderr.
Secret values never reach either: everything printed comes from plans, records and
failures, which hold placeholders and references only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO


class TerminalReporter:
    """Lines as they come; per-process progress redrawn in place on a TTY, else printed
    as plain lines whenever the counts change."""

    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self._last: dict[str, str] = {}
        self._live = False

    def _clear_live(self) -> None:
        if self._live:
            self.stream.write("\r\x1b[2K")
            self._live = False

    def line(self, text: str) -> None:
        if self.quiet:
            return
        self._clear_live()
        self.stream.write(text + "\n")
        self.stream.flush()

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None:
        if self.quiet:
            return
        text = f"  {process}: " + " ".join(f"{k} {v}" for k, v in counts.items())
        if note:
            text += f" — {note}"
        if self._last.get(process) == text:
            return
        self._last[process] = text
        if self.tty:
            self._clear_live()
            self.stream.write(text)
            self._live = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def table(rows: Sequence[Mapping[str, Any]], columns: list[str]) -> list[str]:
    if not rows:
        return []
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*[c.upper() for c in columns]).rstrip()] + [
        fmt.format(*row).rstrip() for row in cells
    ]
