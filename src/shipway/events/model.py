"""The typed events of one operation, in the order they come:

``started`` → ``planned`` → ``step`` … (``said``, ``waiting``, ``canary`` in between) →
``ended``.

Each has a JSON form (``{"event": KIND, "at": …, …}``) that a dashboard or a webhook
receiver reads, and the lines a terminal shows for it (``lines()``: what shipway printed
before the stream existed, unchanged). None holds a secret value: they are made from plans,
records and failures, which hold placeholders and references only; a line a backend says
passes the engine's masking first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from shipway.release.audit import Audit
from shipway.release.model import now_utc


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = ""
    at: str = field(default_factory=now_utc, kw_only=True)

    def lines(self) -> list[str]:
        """What a terminal shows for it (nothing: it is not shown as a line)."""
        return []

    def fields(self) -> dict[str, Any]:
        return {}

    def to_json(self) -> dict[str, Any]:
        return {"event": self.kind, "at": self.at, **self.fields()}


@dataclass(frozen=True)
class Started(Event):
    """An operation took the slot's lock and begins: what, where, and who (user, host, the
    source's commit and author, a CI identity, the clearance it was given)."""

    kind: ClassVar[str] = "started"
    operation: str
    app: str
    slot: str
    backend: str
    who: Audit

    def fields(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "app": self.app,
            "slot": self.slot,
            "backend": self.backend,
            "who": self.who.to_json(),
        }


@dataclass(frozen=True)
class Planned(Event):
    """The plan it walks: its revision, one-line change summary, and its lines."""

    kind: ClassVar[str] = "planned"
    operation: str
    revision: int | None
    summary: str
    plan: tuple[str, ...]

    def lines(self) -> list[str]:
        return list(self.plan)

    def fields(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "revision": self.revision,
            "summary": self.summary,
            "plan": list(self.plan),
        }


@dataclass(frozen=True)
class StepBegun(Event):
    """Step ``index`` of ``total`` begins (``label``: ``rollback to r3 `` for an undo)."""

    kind: ClassVar[str] = "step"
    index: int
    total: int
    text: str
    label: str = ""

    def lines(self) -> list[str]:
        return [f"{self.label}[{self.index}/{self.total}] {self.text}"]

    def fields(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "total": self.total,
            "step": self.text,
            "phase": self.label.strip() or "rollout",
        }


@dataclass(frozen=True)
class Said(Event):
    """A line the engine or a backend says while working (a note, a warning, a retry)."""

    kind: ClassVar[str] = "said"
    text: str

    def lines(self) -> list[str]:
        return [self.text]

    def fields(self) -> dict[str, Any]:
        return {"text": self.text}


@dataclass(frozen=True)
class Waiting(Event):
    """How a wait on one process stands: its counts (``ready 1 of 2``) and the last probe."""

    kind: ClassVar[str] = "waiting"
    process: str
    counts: Mapping[str, int]
    note: str = ""

    def fields(self) -> dict[str, Any]:
        return {"process": self.process, "counts": dict(self.counts), "note": self.note}


@dataclass(frozen=True)
class Ended(Event):
    """How the operation ended: one of the outcomes (``rolled``, ``unchanged``,
    ``rolled-back``, ``rollback-failed``, ``no-anchor``) with its exit code, headline,
    details and JSON form — or ``error``, when it stopped on an error or a signal after it
    started (``outcome`` then holds the message)."""

    kind: ClassVar[str] = "ended"
    outcome: str
    exit_code: int
    line: str
    details: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    app: str = ""
    slot: str = ""
    operation: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def fields(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "line": self.line,
            "details": list(self.details),
            "result": dict(self.data),
            "app": self.app,
            "slot": self.slot,
            "operation": self.operation,
        }


@dataclass(frozen=True)
class Recovered(Event):
    """An earlier operation that died (its release left pending) was resolved by this one:
    its release recorded ``deployed`` (it runs whole) or ``failed`` (the anchor put back).
    Its own ``ended`` never came; this is how it is told. ``who``: who started it."""

    kind: ClassVar[str] = "recovered"
    app: str
    slot: str
    revision: int
    result: str
    line: str
    who: Audit | None = None

    def fields(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "slot": self.slot,
            "revision": self.revision,
            "result": self.result,
            "line": self.line,
            "who": self.who.to_json() if self.who else None,
        }


@dataclass(frozen=True)
class CanaryFigures(Event):
    """A canary's figures, read by its analysis: the share it has (step ``step`` of
    ``steps``, ``percent``), each side's counts over the step's window (``requests``,
    ``bad``, ``5xx``, ``failures``, ``p99_ms`` — null until it has answered), and the
    verdict (``hold`` while it is still counting; ``promote`` or ``abort`` once decided,
    ``final`` then true). Emitted while a step holds (at most twice a second) and once
    for each decision. Not shown as a line: the engine says the decision itself."""

    kind: ClassVar[str] = "canary"
    app: str
    slot: str
    revision: int
    step: int
    steps: tuple[int, ...]
    percent: int
    verdict: str
    why: str
    elapsed: float
    canary: Mapping[str, Any]
    stable: Mapping[str, Any]
    final: bool = False

    def fields(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "slot": self.slot,
            "revision": self.revision,
            "step": self.step,
            "steps": list(self.steps),
            "percent": self.percent,
            "verdict": self.verdict,
            "why": self.why,
            "elapsed": round(self.elapsed, 3),
            "canary": dict(self.canary),
            "stable": dict(self.stable),
            "final": self.final,
        }


KINDS: tuple[type[Event], ...] = (
    Started,
    Planned,
    StepBegun,
    Said,
    Waiting,
    CanaryFigures,
    Ended,
    Recovered,
)
