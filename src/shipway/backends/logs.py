"""What ``shipway logs`` asks a backend for, and what it gets back: the query, each line
(where it comes from, when, its text with secrets masked), and the view of them.
Plain values, no I/O."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class LogQuery:
    """What ``shipway logs`` asks for: the last ``lines`` lines (all processes together,
    interleaved by time), those written at or after ``since`` (epoch seconds), of what runs
    or of one release's instances (``release``, a failed one too), then, with ``follow``,
    every new line."""

    process: str | None = None
    lines: int = 50
    since: float | None = None
    release: int | None = None
    follow: bool = False


@dataclass(frozen=True)
class LogLine:
    """One line of a log: where it comes from (``web.1@r3``), when it was written (epoch
    seconds; None when the backend cannot tell), and its text, secrets masked."""

    source: str
    at: float | None
    text: str

    @property
    def process(self) -> str:
        return self.source.split("@", 1)[0].split(".", 1)[0]


@dataclass(frozen=True)
class LogView:
    """The lines a query selects, and — when it is not simply what runs now (a stopped
    slot, a failed first deploy, ``--release``) — a line saying what they are."""

    about: str | None
    lines: Iterator[LogLine]
