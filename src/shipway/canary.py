"""The public API of a slot's canary (``strategy = "canary"``, docs/canary.md): its live
counts and the state of its test, and a person's promote or abort.

A canary is walked by the deploy that started it, under the slot's lock. A decision by hand
is a note that names the canary (``app.slot.r<N>``); the deploy reads it at its next look
(every 0.5 s while it holds a share) and acts as if its test had decided: an abort takes the
canary's share to 0 first. A deploy that has not taken it within 5 s is waited for, up to
60 s in all, while it still notes its state (within the last 15 s). When no deploy runs the
canary any more (it was killed), an abort is the recovery the
next operation would do anyway — under the lock, every request back to the deployed release
and the canary's processes removed; a promotion finishes what the deploy would have done —
under the lock, the switch to 100 %, the stable drained and removed, the release recorded
deployed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from shipway.api import _backend, _engine, clear
from shipway.errors import InputError
from shipway.spec.model import App

if TYPE_CHECKING:
    from shipway.backends.protocol import Backend, Reporter
    from shipway.engine import Outcome

Verdict = Literal["promote", "abort"]
#: how long a deploy running the canary gets to take a decision by hand
TAKEN_WITHIN = 5.0
#: ... and in all while it still notes its state (a loaded machine, a slow proxy or API)
TAKEN_MAX = 60.0
#: a deploy whose state note is older than this has stopped walking its canary
NOTED_WITHIN = 15.0


def status(app: App, slot: str, *, backend: Backend | None = None) -> dict[str, Any]:
    """The slot's canary now: its share, the proxy's counts per release (since it started),
    the last analysis of the deploy running it (its window, the tests' statistics and
    bounds, the verdict), and whether that deploy still runs."""
    from shipway.backends.canary import canaries_of
    from shipway.backends.liveness import pid_alive

    _canary_slot(app, slot)
    target = app.slots.target(slot)
    with _backend(app, slot, backend) as b:
        canaries = canaries_of(b)
        counts = canaries.canary_counts(target)
        state = canaries.read_canary_note(target, "state")
    live = counts is not None
    if state is not None and counts is not None and state.get("canary") != counts.canary:
        state = None  # the note of an earlier canary
    pid = int(state["pid"]) if state and "pid" in state else None
    return {
        "slot": slot,
        "running": live,
        "canary": counts.canary if counts else (state or {}).get("canary"),
        "percent": counts.percent if counts else 0,
        "steps": (state or {}).get("steps") or list(_rules(app, slot).steps),
        "split": _rules(app, slot).split,
        "deploy_pid": pid,
        "deploy_alive": bool(pid and pid_alive(pid)) if live else False,
        "counts": counts.to_json() if counts else None,
        "analysis": (state or {}).get("analysis") if live else None,
    }


@dataclass(frozen=True)
class Decided:
    """What a decision by hand did: taken by the deploy running the canary (``pid``), or
    applied here to a canary left behind (``outcome``), or nothing to decide."""

    verdict: Verdict
    canary: str | None
    pid: int | None = None
    outcome: Outcome | None = None
    line: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "canary": self.canary,
            "taken_by_pid": self.pid,
            "message": self.line,
        }
        if self.outcome is not None:
            out["outcome"] = self.outcome.to_json()
        return out


def decide(
    app: App,
    slot: str,
    verdict: Verdict,
    *,
    confirm: str | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Decided:
    """Promote or abort the slot's canary by hand (a clearance first, like every mutation)."""
    from shipway.backends.canary import canaries_of
    from shipway.release.model import now_utc

    _canary_slot(app, slot)
    clearance = clear(app, slot, confirm, backend)
    target = app.slots.target(slot)
    with _backend(app, slot, backend) as b:
        canaries = canaries_of(b)
        counts = canaries.canary_counts(target)
        if counts is None:
            return Decided(
                verdict, None, line=f"no canary runs in slot {slot!r}: nothing to {verdict}"
            )
        note = {"canary": counts.canary, "verdict": verdict, "actor": _actor(), "at": now_utc()}
        canaries.canary_note(clearance, target, "decision", note)
        started, told = time.monotonic(), False
        while True:
            if canaries.read_canary_note(target, "decision") is None:
                state = canaries.read_canary_note(target, "state") or {}
                pid = state.get("pid")
                said = f"the deploy running canary {counts.canary} took it: {verdict}"
                return Decided(verdict, counts.canary, pid=pid, line=said)
            waited = time.monotonic() - started
            if waited >= TAKEN_WITHIN:
                state = canaries.read_canary_note(target, "state") or {}
                age = _noted_ago(state, counts.canary)
                if age is None or age > NOTED_WITHIN or waited >= TAKEN_MAX:
                    break
                if not told and reporter is not None:
                    reporter.line(
                        f"waiting for the deploy running canary {counts.canary} (pid "
                        f"{state.get('pid')}, its state noted {age:.0f}s ago) to take it"
                    )
                    told = True
            # past the first 5 s, at the pace the deploy looks (each read on Docker: an archive)
            time.sleep(0.05 if waited < TAKEN_WITHIN else 0.5)
        canaries.canary_note(clearance, target, "decision", None)  # nobody took it
        with _engine(app, slot, b, reporter) as engine:
            if verdict == "promote":
                outcome = engine.finish_canary(clearance, app, slot)
                said = f"canary {counts.canary} was left behind: promoted to 100% here"
            else:
                outcome = engine.repair(clearance, app, slot)
                said = (
                    f"canary {counts.canary} was left behind: every request to the deployed release"
                )
        return Decided(verdict, counts.canary, outcome=outcome, line=said)


def _noted_ago(state: dict[str, Any], canary: str) -> float | None:
    """Seconds since a deploy walking ``canary`` noted its state (None: no such note)."""
    if state.get("canary") != canary or not isinstance(state.get("at"), str):
        return None
    try:
        at = datetime.fromisoformat(state["at"])
    except ValueError:
        return None
    return max(0.0, (datetime.now(UTC) - at).total_seconds())


def _canary_slot(app: App, slot: str) -> None:
    if app.slots.get(slot).canary is None:
        raise InputError(
            f'slot {slot!r} runs no canaries (hint: strategy = "canary" in [slots.{slot}])'
        )


def _rules(app: App, slot: str) -> Any:
    return app.slots.get(slot).canary


def _actor() -> str:
    from shipway.engine.context import default_actor

    return default_actor()
