"""Undo and recovery: putting the anchor back after a failed or interrupted rollout, and
resolving a pending release an earlier, dead operation left behind.

What must never happen here:
  * an undo that stops short without saying the slot may be down — whatever stops it (an
    error reading the target, a secret gone) is the undo's failure, never a silent exit;
  * a slot stuck behind a dead deploy (invariant 13) — a pending release found under a
    fresh lock is resolved: the anchor is re-asserted first, and only then is the stuck
    release marked failed (if re-asserting fails it stays pending and the next run retries).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from shipway.backends.protocol import Failure, Reason, generations_of
from shipway.engine.context import Undo
from shipway.engine.telling import Telling
from shipway.engine.walk import Walker, WalkResult
from shipway.errors import BackendError, ShipwayError
from shipway.guard import Clearance
from shipway.plan.generation import switch_steps
from shipway.plan.model import ApplyObject, Remove, RunReleaseCommand, Step
from shipway.plan.rollout import discard_steps, restore_steps, with_waits
from shipway.release import history
from shipway.release.model import Release, ReleaseStatus
from shipway.spec.model import App, Target
from shipway.spec.parse import from_snapshot
from shipway.spec.secrets import Secret, redact

#: failures of an engine call (not a health verdict): an undo stopped by one is tried again
ENGINE_FAULTS = frozenset({Reason.STEP_FAILED, Reason.UNDO_FAILED})
#: how often an undo is walked at most (each time from a fresh read of the slot)
UNDO_ATTEMPTS = 3
#: how long a pending release found running whole gets to show it is ready
VERIFY_WINDOW = 5.0


class Recovery(Telling):
    """Undo a rollout and recover from an interrupted one."""

    def _walk_back(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        secrets: Mapping[str, Secret],
        undo: Undo,
        done: WalkResult,
        anchor: Release | None,
        timeout: float,
        label: str,
    ) -> WalkResult:
        """Plan and walk an undo. Whatever stops it short (an error reading the target, a
        secret gone) is the undo's failure — never an exit that hides that the slot may be
        down. An undo stopped by an engine call that failed (the backend already retried
        it) is not yet a rollback that failed: the slot is read again and the undo planned
        and walked again, this time waiting on every unit of what it puts back, within
        the same timeout — so what is finally said is what the engine shows."""
        deadline = time.monotonic() + timeout

        def walk(verify: bool) -> WalkResult:
            walker = Walker(self.backend, clearance, target, release, secrets, self.reporter)
            try:
                steps = undo(target, done, anchor)
                if verify and anchor is not None and anchor.generation is None:
                    steps = with_waits(steps, anchor.artifact)
                if steps:
                    self.reporter.line(f"{label.strip()}: {len(steps)} steps")
                return walker.run(steps, max(0.0, deadline - time.monotonic()), label)
            except ShipwayError as exc:
                failed = walker.result
                failed.failure = Failure(
                    reason=Reason.UNDO_FAILED,
                    message=f"{label.strip()}: {redact(str(exc), secrets)}",
                    process=getattr(failed.current, "process", None),
                )
                return failed

        attempt = 1
        while True:
            back = walk(verify=attempt > 1)
            failure = back.failure
            if (
                failure is None
                or failure.reason not in ENGINE_FAULTS
                or attempt >= UNDO_ATTEMPTS
                or time.monotonic() >= deadline
            ):
                return back
            attempt += 1
            self.reporter.line(
                f"{label.strip()}: stopped by {failure.headline()}; reading the slot again "
                f"and trying once more (attempt {attempt} of {UNDO_ATTEMPTS})"
            )

    def _undo_stopped(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        anchor: Release | None,
        secrets: Mapping[str, Secret],
        undo: Undo,
        done: WalkResult,
        timeout: float,
        why: str,
    ) -> None:
        """An interrupted (or broken-off) rollout is undone like a failed one. A second
        signal stops the undo."""
        what = f"restoring r{anchor.revision}" if anchor else "removing what it started"
        self.reporter.line(
            f"{why}: r{release.revision} marked failed; {what} (signal again to stop)"
        )
        back = self._walk_back(
            clearance, target, anchor or release, secrets, undo, done, anchor, timeout, "undo "
        )
        kind = why.split(" by ", 1)[0]  # "interrupted", "stopped"
        if back.ok:
            self.reporter.line(f"{kind}: {what} done; the lock is released")
        else:
            assert back.failure is not None
            self.reporter.line(
                f"{kind}: {what} failed ({back.failure.headline()}); the slot MAY BE DOWN or "
                f"serving r{release.revision}: deploy again or roll back"
            )

    def _restore_anchor(
        self, target: Target, result: WalkResult, anchor: Release | None
    ) -> list[Step]:
        """Undo for a rollout: put the anchor back; with no anchor, stop what was created.
        Only the anchor's own generation is considered: other generations are not its to
        prune."""
        observed = self.backend.observe(target)
        if anchor is None:
            return discard_steps(result.created(), observed)
        return restore_steps(anchor.artifact, observed.of_generation(anchor.generation))

    def _reassert_steps(
        self, target: Target, records: Sequence[Release], anchor: Release, stuck: Release
    ) -> list[Step]:
        """Steps that make the anchor what runs and serves again."""
        if anchor.generation is None:
            observed = self.observe(target, records)
            return restore_steps(anchor.artifact, observed.of_generation(None))
        gb = generations_of(self.backend)
        recorded = from_snapshot(anchor.spec, Path("."))
        slot = recorded.slots.get(target.slot)
        return switch_steps(
            to_generation=anchor.generation,
            from_generation=stuck.generation,
            replicas={name: p.replicas for name, p in recorded.processes.items()},
            hosts=gb.hosts(recorded, slot),
        )

    def _recover(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        records: list[Release],
        secrets: Mapping[str, Secret],
        timeout: float,
    ) -> list[Release]:
        """Invariant 13: a pending release found under our (fresh) lock belongs to a deploy
        that died. Mark it failed and put the anchor back, saying so."""
        stuck = history.pending(records)
        if not stuck:
            return records
        for release in stuck:
            self.reporter.line(
                f"recovering: r{release.revision} was left pending by an interrupted operation "
                f"({release.actor}, {release.created_at})"
            )
        if self._runs_whole(clearance, target, app, records, stuck[-1], secrets, timeout):
            newest = stuck[-1]
            written = history.promote_to_deployed(records, newest) + [
                r.with_status(
                    ReleaseStatus.FAILED, "interrupted: its operation stopped before finishing"
                )
                for r in stuck[:-1]
            ]
            self.backend.write_records(clearance, target, written)
            self.reporter.line(
                f"r{newest.revision} is what runs, whole and ready: recorded as deployed "
                "(its record was behind)"
            )
            self._recovered(target, stuck, newest)
            return self.backend.read_records(target)
        anchor = history.deployed(records)
        if anchor is None:
            self.reporter.line("nothing was deployed before it: nothing to re-assert")
        else:
            self.reporter.line(f"re-asserting r{anchor.revision}, the deployed release")
            back = self._walk_back(
                clearance,
                target,
                anchor,
                self._secrets_of(anchor, app, secrets),
                lambda t, _done, a: self._reassert_steps(t, records, anchor, stuck[-1]),
                WalkResult(),
                anchor,
                timeout,
                "re-assert ",
            )
            if not back.ok:
                # still pending: the next operation tries again
                assert back.failure is not None
                raise BackendError(
                    f"could not re-assert r{anchor.revision}: {back.failure.headline()} "
                    f"(r{stuck[-1].revision} stays pending; the next operation tries again)"
                )
        # only once the anchor is back (or there is none): marked failed
        for release in stuck:
            self._fail(
                clearance, target, release, "interrupted: its operation stopped before finishing"
            )
            self.reporter.line(f"r{release.revision} marked failed")
        self._recovered(target, stuck, None)
        return self.backend.read_records(target)

    def _runs_whole(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        records: Sequence[Release],
        stuck: Release,
        secrets: Mapping[str, Secret],
        timeout: float,
    ) -> bool:
        """Whether the pending release ``stuck`` is exactly what runs (nothing of it to
        apply, nothing else to remove) and ready now: a rollout that finished but whose
        final record could not be written. Then the record is what is behind, and is
        repaired — putting the anchor back would undo a good release. A blue-green
        release, or one not (yet) whole or ready, is resolved as interrupted."""
        if stuck.generation is not None or not stuck.artifact.units:
            return False
        steps = restore_steps(stuck.artifact, self.observe(target, records).of_generation(None))
        if any(isinstance(s, ApplyObject | Remove | RunReleaseCommand) for s in steps):
            return False
        own = self._secrets_of(stuck, app, secrets)
        walker = Walker(self.backend, clearance, target, stuck, own, self.reporter)
        window = min(timeout, VERIFY_WINDOW)
        verified = walker.run(with_waits([], stuck.artifact), window, "verify ")
        if verified.failure is not None:
            self.reporter.line(
                f"r{stuck.revision} runs whole but is not ready ({verified.failure.headline()})"
            )
        return verified.ok
