"""What a slot is doing, in one word and one line, from its records and what runs — as
``status`` and ``ls`` show it, on every backend: ``nothing deployed``, ``deploying`` (a
pending release: someone's deploy holds the slot), ``stopped`` (a deployed release, nothing
of it running), ``failed rN`` (the newest release failed; the line says what serves
instead), ``degraded`` (fewer ready than desired), ``running``. Every backend keeps records
and reports processes alike, so all say the same words. Plain values, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shipway.backends.protocol import ProcessStatus
from shipway.release import history as _history
from shipway.release.model import Release, ReleaseStatus


@dataclass(frozen=True)
class SlotState:
    word: str
    line: str
    #: the newest release's revision when it failed (``failed rN``)
    failed: int | None = None
    #: who deploys now, when a release is pending
    held_by: str | None = None


NOTHING = SlotState("nothing deployed", "nothing deployed")


def slot_state(records: Sequence[Release], processes: Sequence[ProcessStatus]) -> SlotState:
    ordered = _history.ordered(records)
    if not ordered:
        return NOTHING
    newest = ordered[-1]
    deployed = _history.deployed(ordered)
    serving = f"r{deployed.revision}" if deployed else "nothing"
    if newest.status == ReleaseStatus.PENDING:
        return SlotState(
            "deploying",
            f"deploying r{newest.revision} (held by {newest.actor} since "
            f"{newest.created_at}); {serving} is the deployed release",
            held_by=newest.actor,
        )
    running = [p for p in processes if p.ready > 0]
    if deployed is not None and not running:
        return SlotState(
            "stopped",
            f"stopped: r{deployed.revision} is the deployed release, nothing of it runs "
            "(shipway deploy or restart brings it back)",
        )
    if newest.status == ReleaseStatus.FAILED:
        why = _first_line(newest.description)
        serves = f"r{deployed.revision} serves" if deployed else "nothing serves"
        return SlotState(
            f"failed r{newest.revision}",
            f"failed r{newest.revision} ({why}); {serves}",
            failed=newest.revision,
        )
    if deployed is None:
        return NOTHING
    short = [p for p in processes if p.ready < p.desired]
    word = "degraded" if short else "running"
    detail = ", ".join(f"{p.process} {p.ready}/{p.desired} ready" for p in short)
    return SlotState(
        word,
        f"{word} r{deployed.revision}, deployed {deployed.updated_at}"
        + (f" ({detail})" if detail else "")
        + f" — {_first_line(deployed.description)}",
    )


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""
