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
from dataclasses import dataclass
from typing import TypeVar

from shipway.backends.protocol import LockHolder, image_pruner_of
from shipway.engine.accessories import start_accessories
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
from shipway.plan.model import Plan
from shipway.release import history
from shipway.release.model import Release
from shipway.spec.model import App, Target
from shipway.spec.secrets import Secret, redact

AnyOutcome = TypeVar("AnyOutcome", bound=Outcome)


@dataclass(frozen=True, slots=True)
class Rollout:
    """What one rollout was given and keeps for its whole length: the slot, its clearance,
    the app and secrets it runs with, and how it is undone (``undo`` makes the steps,
    ``rollback_timeout`` bounds them; ``restores``: what an undo puts back besides the
    anchor revision — set-image's image read first)."""

    clearance: Clearance
    target: Target
    app: App
    secrets: Mapping[str, Secret]
    undo: Undo
    rollback_timeout: float
    restores: Callable[[], str] | None = None
    #: what the request took besides the clearance (``take-host``, ``take-over``): audited
    taken: tuple[str, ...] = ()


@dataclass(slots=True)
class Planned:
    """What planning under the lock made: the records and the anchor read first, the plan
    and the release it records, the walker that applies it, the secrets that put the
    anchor back, and the data-loss warning read before anything replaced the anchor."""

    records: list[Release]
    anchor: Release | None
    plan: Plan
    walker: Walker
    back_secrets: dict[str, Secret]
    lost: str | None


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
        taken: tuple[str, ...] = (),
    ) -> Outcome:
        """The algorithm: under the slot's lock, plan (records and anchor first), walk the
        plan, then record it rolled — or, when a step failed, undo it and say which of the
        failed outcomes it is. ``check_data``: warn, once rolled, about files the anchor
        wrote inside its own copy of the app (:mod:`.data_loss`)."""
        run = Rollout(clearance, target, app, secrets, undo, rollback_timeout, restores, taken)
        holder = LockHolder.me(self.lock_ttl)
        with signals_raise(), self.backend.lock(clearance, target, holder, self.reporter):
            try:
                return self._rollout_locked(run, build, timeout, check_data)
            except BaseException as exc:  # a started operation ends once, even so
                self._end_stopped(exc, secrets)
                raise

    def _rollout_locked(
        self, run: Rollout, build: Build, timeout: float, check_data: bool
    ) -> Outcome:
        """The rollout under the lock (:meth:`_rollout`)."""
        clearance, target, app, secrets = run.clearance, run.target, run.app, run.secrets
        planned = self._plan_locked(run, build, check_data, timeout)
        if isinstance(planned, Unchanged):
            return self._settled(planned)
        result = self._walk_plan(run, planned, timeout)
        release = planned.walker.release  # the build phase names what it built
        if result.ok:
            if planned.lost:
                result.warnings.append(redact(planned.lost, secrets))
            with signals_deferred(self.reporter.line):  # never cut the record in half
                rolled = self._succeed(
                    clearance, target, app, planned.records, release, planned.anchor, result
                )
                return self._settled(rolled)
        return self._settled(self._fail_and_undo(run, planned, release, result))

    def _plan_locked(
        self, run: Rollout, build: Build, check_data: bool, timeout: float
    ) -> Planned | Unchanged:
        """Records first (a pending one left by a dead deploy resolved), the anchor read
        before anything is patched, then the plan. "No changes" is an answer: nothing of
        the app is applied and no revision recorded (an accessory that was down is started
        first, under the lock)."""
        clearance, target, secrets = run.clearance, run.target, run.secrets
        records = self.backend.read_records(target)
        records = self._recover(clearance, target, run.app, records, secrets, run.rollback_timeout)
        anchor = history.deployed(records)  # the anchor: read before anything is patched
        # what the anchor wrote inside itself, read beside the observation and the plan
        written = WrittenInside(self.backend, target, anchor if check_data else None, run.app)
        try:
            observed = self.observe(target, records)
            plan = build(records, observed)
            who = self._begin(clearance, target, run.app, plan, run.taken, secrets)
            if plan.unchanged and plan.diff is not None and plan.diff.before is not None:
                started = start_accessories(
                    self.backend, clearance, target, plan.steps, timeout, self.reporter
                )
                return Unchanged(str(target), plan.diff.before, plan.operation, started)
            if plan.release is None:
                raise InputError("the plan records no release")
            # the marks of the secret values this release is applied with, now
            release = self._audited(marked(plan.release, secrets, records), who)
            builder = self._builder(clearance, target, run.app, secrets)
            walker = Walker(
                self.backend, clearance, target, release, secrets, self.reporter, builder
            )
            # what undoes this release: the anchor, with the secrets its own spec refers to
            back_secrets = self._secrets_of(anchor, run.app, secrets)
            # read before anything replaces the anchor's copy of the app
            lost = written.warning(release)
        finally:  # no read outlives the lock, whatever ended the planning
            written.join()
        return Planned(records, anchor, plan, walker, back_secrets, lost)

    def _walk_plan(self, run: Rollout, planned: Planned, timeout: float) -> WalkResult:
        """The pending record first, then the steps. A signal, or an error no step turned
        into a failure, is undone like a failed rollout and raised again, so the slot never
        keeps serving what its history calls failed."""
        clearance, target, walker = run.clearance, run.target, planned.walker
        try:
            # inside the try: a signal landing between the pending record and the first
            # step is handled like any other interruption
            self.backend.write_records(clearance, target, [walker.release])
            return walker.run(planned.plan.steps, timeout)
        except BaseException as exc:
            release = walker.release  # with what its build step made, if it ran
            why = (
                f"interrupted by {exc}"
                if isinstance(exc, Interrupted)
                else f"stopped by an error: {redact(str(exc), run.secrets)}"
            )
            behind = self._mark_failed(clearance, target, release, why)
            self._undo_stopped(
                clearance,
                target,
                release,
                planned.anchor,
                planned.back_secrets,
                run.undo,
                walker.result,
                run.rollback_timeout,
                why,
            )
            if behind is not None and self._mark_failed(clearance, target, release, why):
                self.reporter.line(self._behind(release, "what serves is not verified"))
            raise

    def _fail_and_undo(
        self, run: Rollout, planned: Planned, release: Release, result: WalkResult
    ) -> NoAnchor | RolledBack | RollbackFailed:
        """A step failed: the release recorded failed, the anchor put back, and the outcome
        said honestly — rolled back, rollback failed (the slot MAY BE DOWN), or no anchor."""
        clearance, target, anchor = run.clearance, run.target, planned.anchor
        assert result.failure is not None
        failure = result.failure
        # a record that cannot be written never stops the rollback (a bad release left
        # serving is the worst outcome there is); it is tried again after the rollback
        behind = self._mark_failed(clearance, target, release, failure.headline())
        # the details (a log excerpt) are told once, with the outcome, not here too
        self.reporter.line(failure.headline())
        label = f"rollback to r{anchor.revision} " if anchor else "cleanup "
        back = self._walk_back(
            clearance, target, anchor or release, planned.back_secrets, run.undo, result,
            anchor, run.rollback_timeout, label,
        )  # fmt: skip
        warnings = result.warnings + back.warnings
        if behind is not None:
            behind = self._mark_failed(clearance, target, release, failure.headline())
        # a source slot's own workload put back (set-image): what serves, without an anchor
        restored = run.restores() if run.restores is not None else ""
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
            return NoAnchor(str(target), release.revision, failure, tuple(warnings), late)
        to = anchor.revision if anchor is not None else None
        if back.ok:
            return RolledBack(
                str(target), release.revision, to, failure, tuple(warnings), late, restored
            )
        assert back.failure is not None
        return RollbackFailed(
            str(target), release.revision, to, failure, back.failure, tuple(warnings), late,
            restored,
        )  # fmt: skip

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
        self._end(outcome)
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
        pruner = image_pruner_of(self.backend)
        if pruner is not None:  # the images no kept release needs (best effort, said)
            keep = [r for r in merged.values() if r.revision not in drop]
            try:
                said, problems = pruner.prune_images(
                    clearance, target, keep, [merged[r] for r in drop]
                )
            except BackendError as exc:
                said, problems = [], [f"pruning old images failed: {exc}"]
            for line in said:
                self.reporter.line(line)
            warnings += problems
        return Rolled(
            str(target), anchor.revision if anchor else None, release.revision, tuple(warnings)
        )
