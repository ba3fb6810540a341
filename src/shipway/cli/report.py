"""Rendering for the command line: progress while working, results as text or JSON.

In JSON mode stdout carries exactly one JSON document; progress goes to stderr.
Secret values never reach either: everything printed comes from plans, records and
failures, which hold placeholders and references only.

A wait is never silent: on a terminal its row is redrawn live with the time it has been
waiting (cli/live.py); otherwise — piped, or ``NO_COLOR`` — a plain line is printed when the
counts or the last probe's result change, and again at least every ``HEARTBEAT`` seconds
while it goes on, with how long it has been waiting.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from shipway.cli.term import colour_on, paint

if TYPE_CHECKING:
    from shipway.cli.live import LiveWaits
    from shipway.events.model import Ended, Event
    from shipway.events.sink import Sink

#: the longest a wait goes without a line saying what it waits for (plain output)
HEARTBEAT = 5.0


@dataclass
class Wait:
    """What one process's wait last reported, and since when it has been waiting."""

    process: str
    counts_text: str
    note: str
    done: bool
    since: float
    printed: float = 0.0

    def text(self, now: float) -> str:
        out = f"  {self.process}: {self.counts_text}"
        if self.note:
            out += f" — {self.note}"
        waited = now - self.since
        if not self.done and waited >= 1:
            out += f" (waiting {waited:.0f}s)"
        return out


def counts_text(counts: Mapping[str, int]) -> str:
    return " ".join(f"{k} {v}" for k, v in counts.items())


def finished(counts: Mapping[str, int]) -> bool:
    """Every count has reached the total (``of`` / ``desired``); unknown: not finished."""
    total = counts.get("of", counts.get("desired"))
    rest = [v for k, v in counts.items() if k not in ("of", "desired")]
    return total is not None and bool(rest) and all(v >= total for v in rest)


class TerminalReporter:
    """The command line's subscriber to the event stream (events/): each event's lines as
    they come; the waits in progress live on a terminal, plain lines (with a heartbeat)
    otherwise; the ``ended`` event kept, for the outcome the command prints last (from it,
    and from nothing else). :meth:`close` ends the live view and the heartbeat."""

    def __init__(
        self,
        stream: TextIO | None = None,
        quiet: bool = False,
        *,
        styled: bool | None = None,
        heartbeat: float = HEARTBEAT,
    ) -> None:
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.styled = colour_on(self.stream) if styled is None else styled
        self.heartbeat = heartbeat
        self._waits: dict[str, Wait] = {}
        self._lock = threading.RLock()
        self._live: LiveWaits | None = None
        self._ticker: threading.Thread | None = None
        self._closed = threading.Event()
        #: the operation's outcome, as the stream told it
        self.ended: Ended | None = None
        #: where the events also go (``SHIPWAY_EVENTS``: a file of JSON lines)
        self.also: list[Sink] = []

    def emit(self, event: Event) -> None:
        from shipway.events.model import Ended
        from shipway.events.sink import render

        for sink in self.also:
            sink.emit(event)
        if isinstance(event, Ended):
            self.ended = event
            return
        render(event, self)

    def line(self, text: str) -> None:
        if self.quiet:
            return
        with self._lock:
            self._settle()
            self._write(text)

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None:
        if self.quiet:
            return
        now = time.monotonic()
        done = finished(counts)
        text = counts_text(counts)
        with self._lock:
            wait = self._waits.get(process)
            if wait is None or (wait.done and not done):
                wait = Wait(process, text, note, done, since=now)
                # a new dict, never one changed in place: the live view reads it unlocked
                self._waits = {**self._waits, process: wait}
                changed = True
            else:
                changed = (wait.counts_text, wait.note, wait.done) != (text, note, done)
                wait.counts_text, wait.note, wait.done = text, note, done
            if self.styled:
                self._show_live()
                if all(w.done for w in self._waits.values()):
                    self._settle()
                return
            if changed:
                self._print(wait, now)
            self._start_heartbeat()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._settle()

    # -- output ----------------------------------------------------------------------

    def _write(self, text: str, role: str = "") -> None:
        from shipway.cli.hints import pasteable

        self.stream.write(paint(pasteable(text), role, self.styled) + "\n")
        self.stream.flush()

    def _print(self, wait: Wait, now: float) -> None:
        self._write(wait.text(now))
        wait.printed = now

    def _show_live(self) -> None:
        if self._live is None:
            from shipway.cli.live import LiveWaits

            self._live = LiveWaits(self.stream, lambda: self._waits)

    def _settle(self) -> None:
        """The waits shown are over (or a line interrupts them): on a terminal the live view
        goes and each wait's last state stays as a line; the heartbeat stops for them."""
        if self._live is not None:
            self._live.stop()
            self._live = None
            now = time.monotonic()
            for wait in self._waits.values():
                took = f" ({now - wait.since:.1f}s)" if wait.done else ""
                self._write(wait.text(now) + took, "ok" if wait.done else "warn")
        self._waits = {}

    def _start_heartbeat(self) -> None:
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._beat, name="progress", daemon=True)
            self._ticker.start()

    def _beat(self) -> None:
        tick = min(0.5, self.heartbeat / 2)
        while not self._closed.wait(tick):
            with self._lock:
                now = time.monotonic()
                for wait in self._waits.values():
                    if not wait.done and now - wait.printed >= self.heartbeat:
                        self._print(wait, now)


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def table(
    rows: Sequence[Mapping[str, Any]],
    columns: list[str],
    max_width: int | None = None,
    coloured: Sequence[str] = (),
    shrink: Sequence[str] = (),
) -> list[str]:
    """Rows under upper-case headers, in columns as wide as their widest cell; a missing
    value is an empty cell (never a shifted column).

    With ``max_width``, columns are narrowed until a line fits: the ``shrink`` columns
    first, in that order, then the widest; a cut cell ends in ``…``, except a reference
    with a digest, which keeps the digest (``local:/src…@sha256:0f06048b5eda``). The cells
    of the ``coloured`` columns are painted by what they say (term.MEANING): pass them
    only when colour is on."""
    if not rows:
        return []
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    if max_width is not None:
        order = [columns.index(c) for c in shrink if c in columns]
        widths = _fit(widths, [len(c) for c in columns], max_width, order)
    header = "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))
    lines = [header.rstrip()]
    for row in cells:
        parts = []
        for column, cell, w in zip(columns, row, widths, strict=True):
            text = _cut(cell, w)
            padded = text.ljust(w)
            if column in coloured:
                padded = paint(text, text.split(" ")[0], True) + " " * (w - len(text))
            parts.append(padded)
        lines.append("  ".join(parts).rstrip())
    return lines


def _fit(widths: list[int], floors: list[int], max_width: int, first: list[int]) -> list[int]:
    """Narrow columns until the line fits: the ``first`` ones (in order) down to their
    floor, then always the widest; never a column below its header, or below 8."""
    widths = list(widths)
    floor = [max(f, 8) for f in floors]

    def excess() -> int:
        return sum(widths) + 2 * (len(widths) - 1) - max_width

    for i in first:
        widths[i] -= max(0, min(excess(), widths[i] - floor[i]))
    while excess() > 0:
        i = max(range(len(widths)), key=lambda j: widths[j] - floor[j])
        if widths[i] <= floor[i]:
            break
        widths[i] -= 1
    return widths


def _cut(cell: str, width: int) -> str:
    if len(cell) <= width:
        return cell
    at = cell.rfind("@sha256:")
    if at > 0 and len(cell) - at < width - 1:
        tail = cell[at:]
        return cell[: width - 1 - len(tail)] + "…" + tail
    return cell[: width - 1] + "…"


def listing(
    as_json: bool,
    slot: str,
    what: str,
    rows: list[dict[str, Any]],
    columns: list[str],
    max_width: int | None = None,
) -> int:
    """``{"slot": SLOT, WHAT: rows}`` with -o json, else a table (or a line saying there
    is none)."""
    import click

    if as_json:
        emit_json({"slot": slot, what: rows})
        return 0
    if not rows:
        click.echo(f"no {what} in slot {slot!r}")
    for line in table(rows, columns, max_width):
        click.echo(line)
    return 0


def age(stamp: str) -> str:
    """How long ago an ISO timestamp was: ``42s``, ``5m``, ``3h``, ``2d``."""
    from datetime import UTC, datetime

    try:
        then = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    seconds = int((datetime.now(UTC) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"
