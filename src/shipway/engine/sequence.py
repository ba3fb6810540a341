"""Sequencing: lock → recover → anchor → record pending → walk → record → restore.

What must never happen, and where it is prevented:
  * a change without a clearance for exactly this slot — ``require_covers`` is the first
    call of every mutating entry point, before the lock or any read;
  * a patch before the anchor (what runs now) is read — records are read right after the
    lock, before the plan is built or walked;
  * a failure that leaves no trace — the pending record is written before the first step,
    and every exit path (failure, signal, bug) rewrites it as failed;
  * a slot stuck behind a dead deploy — a pending release found under a fresh lock is marked
    failed and the anchor re-asserted, with a line saying so;
  * a rollback starved by the deploy's timeout — the rollback has its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from shipway.backends.protocol import LockHolder
from shipway.engine.build import BuildPhase
from shipway.engine.context import Build, Undo, marked
from shipway.engine.data_loss import WrittenInside
from shipway.engine.outcome import (
    NoAnchor,
    Outcome,
    RollbackFailed,
    Rolled,
    RolledBack,
    Unchanged,
)
from shipway.engine.recovery import Recovery
from shipway.engine.signals import settle, signals_deferred, signals_raise
from shipway.engine.walk import Walker, WalkResult
from shipway.errors import BackendError, InputError, Interrupted
from shipway.guard import Clearance
from shipway.release import history
from shipway.release.model import Release
from shipway.spec.model import App, Target
from shipway.spec.secrets import Secret, redact

AnyOutcome = TypeVar("AnyOutcome", bound=Outcome)


class RolloutSequence(Recovery, BuildPhase):
    """The shared sequence of every mutating operation."""

    def _rollout(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        secrets: Mapping[str, Secret],
        build: Build,
        undo: Undo,
        timeout: float,
        rollback_timeout: float,
        check_data: bool = False,
        restores: Callable[[], str] | None = None,
    ) -> Outcome:
        """``check_data``: warn, once rolled, about files the anchor wrote inside its own
        copy of the app (a deploy replaces that copy; :mod:`.data_loss`). ``restores``: what
        the undo puts back besides the anchor revision (set-image: the image read first) —
        with it, an undo is possible, and said, even when no revision was deployed before."""
        holder = LockHolder.me(self.lock_ttl)
        with signals_raise(), self.backend.lock(clearance, target, holder, self.reporter):
            records = self.backend.read_records(target)
            records = self._recover(clearance, target, app, records, secrets, rollback_timeout)
            anchor = history.deployed(records)  # the anchor: read before anything is patched
            # what the anchor wrote inside itself, read beside the observation and the plan
            written = WrittenInside(self.backend, target, anchor if check_data else None, app)
            try:
                observed = self.observe(target, records)
                plan = build(records, observed)
                if plan.unchanged and plan.diff is not None and plan.diff.before is not None:
                    # "no changes": nothing is applied and no revision recorded; the lock was
                    # held for the check only
                    return self._settled(Unchanged(str(target), plan.diff.before, plan.operation))
                if plan.release is None:
                    raise InputError("the plan records no release")
                # the marks of the secret values this release is applied with, now
                release = marked(plan.release, secrets, records)
                for line in plan.describe():
                    self.reporter.line(line)
                builder = self._builder(clearance, target, app, secrets)
                walker = Walker(
                    self.backend, clearance, target, release, secrets, self.reporter, builder
                )
                # what undoes this release: the anchor, with the secrets its own spec refers to
                back_secrets = self._secrets_of(anchor, app, secrets)
                # read before anything replaces the anchor's copy of the app
                lost = written.warning(release)
            finally:  # no read outlives the lock, whatever ended the planning
                written.join()
            try:
                # inside the try: a signal landing between the pending record and the first
                # step is handled like any other interruption
                self.backend.write_records(clearance, target, [release])
                result = walker.run(plan.steps, timeout)
            except BaseException as exc:
                release = walker.release  # with what its build step made, if it ran
                # a signal, or an error no step turned into a failure: undone like a failed
                # rollout, so the slot never keeps serving what its history calls failed
                why = (
                    f"interrupted by {exc}"
                    if isinstance(exc, Interrupted)
                    else f"stopped by an error: {redact(str(exc), secrets)}"
                )
                behind = self._mark_failed(clearance, target, release, why)
                self._undo_stopped(
                    clearance,
                    target,
                    release,
                    anchor,
                    back_secrets,
                    undo,
                    walker.result,
                    rollback_timeout,
                    why,
                )
                if behind is not None and self._mark_failed(clearance, target, release, why):
                    self.reporter.line(self._behind(release, "what serves is not verified"))
                raise
            release = walker.release  # the build phase names what it built
            if result.ok:
                if lost:
                    result.warnings.append(redact(lost, secrets))
                with signals_deferred(self.reporter.line):  # never cut the record in half
                    rolled = self._succeed(clearance, target, app, records, release, anchor, result)
                    return self._settled(rolled)
            assert result.failure is not None
            failure = result.failure
            # a record that cannot be written never stops the rollback (a bad release left
            # serving is the worst outcome there is); it is tried again after the rollback
            behind = self._mark_failed(clearance, target, release, failure.headline())
            # the details (a log excerpt) are told once, with the outcome, not here too
            self.reporter.line(failure.headline())
            label = f"rollback to r{anchor.revision} " if anchor else "cleanup "
            back = self._walk_back(
                clearance, target, anchor or release, back_secrets, undo, result, anchor,
                rollback_timeout, label,
            )  # fmt: skip
            warnings = result.warnings + back.warnings
            if behind is not None:
                behind = self._mark_failed(clearance, target, release, failure.headline())
            # a source slot's own workload put back (set-image): what serves, without an anchor
            restored = restores() if restores is not None else ""
            if behind is not None:
                live = (
                    "what serves is not verified"
                    if not back.ok
                    else f"r{anchor.revision} is serving"
                    if anchor
                    else f"{restored} is serving"
                    if restored
                    else "nothing serves"
                )
                warnings.append(self._behind(release, live))
            late = behind is not None
            if anchor is None and not restored:
                return self._settled(
                    NoAnchor(str(target), release.revision, failure, tuple(warnings), late)
                )
            to = anchor.revision if anchor is not None else None
            if back.ok:
                rolled_back = RolledBack(
                    str(target), release.revision, to, failure, tuple(warnings), late, restored
                )
                return self._settled(rolled_back)
            assert back.failure is not None
            down = RollbackFailed(
                str(target),
                release.revision,
                to,
                failure,
                back.failure,
                tuple(warnings),
                late,
                restored,
            )
            return self._settled(down)

    @staticmethod
    def _behind(release: Release, live: str) -> str:
        return (
            f"the release records are behind: they could not be written, and still say "
            f"r{release.revision} is pending ({live}); the next operation on this slot "
            "resolves it"
        )

    def _settled(self, outcome: AnyOutcome) -> AnyOutcome:
        """The outcome is recorded: from here on (releasing the lock, printing it) a signal
        is said and cannot turn it into an interruption."""
        settle(outcome.line(), self.reporter.line)
        return outcome

    def _succeed(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        records: Sequence[Release],
        release: Release,
        anchor: Release | None,
        result: WalkResult,
    ) -> Rolled:
        written = history.promote_to_deployed(records, release)
        warnings = list(result.warnings)
        try:
            self.backend.write_records(clearance, target, written)
        except BackendError as exc:
            # the rollout is done and verified: what the engine shows is the outcome, the
            # record is what lags (the next operation finds r(N) pending, running whole and
            # ready, and records it deployed — see Recovery._runs_whole)
            was = f"r{anchor.revision} deployed and " if anchor else ""
            warnings.append(
                f"r{release.revision} is serving, but its record could not be written "
                f"({exc}): the records still say {was}r{release.revision} pending; the next "
                "operation on this slot repairs them"
            )
            return Rolled(
                str(target),
                anchor.revision if anchor else None,
                release.revision,
                tuple(warnings),
                records_behind=True,
            )
        merged = {r.revision: r for r in records} | {r.revision: r for r in written}
        limit = app.slots.get(target.slot).history_limit
        drop = history.over_limit(list(merged.values()), limit)
        if drop:
            try:
                self.backend.delete_records(clearance, target, drop)
            except BackendError as exc:
                warnings.append(f"pruning old release records failed: {exc}")
        return Rolled(
            str(target), anchor.revision if anchor else None, release.revision, tuple(warnings)
        )
