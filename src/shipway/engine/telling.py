"""The events an operation emits about itself (events/model.py): ``started`` once the
plan is known under the lock (who, what, where), ``planned``, and exactly one ``ended`` —
its outcome, or the error or signal that stopped it after it started. The steps, the waits
and every line come from the walker and the backends, through the same sink.

An operation that records no release (stop, destroy, restore, run, sleep, wake, gc,
freeze, unfreeze, build) is told here too, the same way: :meth:`Telling._telling` around its
work, its ``ended`` made from a :class:`~shipway.engine.done.Done`.

Who acts is read here, once per operation, and kept in the release it records: the
audit trail in the target is the ``started`` event's ``who`` plus the change summary (for
an operation that records no release, the ``started`` event and its notifications carry it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import replace

from shipway.engine.context import EngineContext
from shipway.engine.done import Done
from shipway.engine.outcome import Outcome
from shipway.engine.who import who_acts
from shipway.errors import Interrupted, SecretUnavailable, ShipwayError
from shipway.events.model import Ended, Event, Planned, Recovered, Started
from shipway.events.notify import Notifier, budget
from shipway.events.sink import Fanout, Sink
from shipway.guard import Clearance
from shipway.plan.model import Plan
from shipway.release.audit import Audit
from shipway.release.model import Release
from shipway.spec.model import App, Target
from shipway.spec.secrets import Masker, Secret, redact


def reachable_secrets(app: App, environ: Mapping[str, str] | None) -> dict[str, Secret]:
    """The app's secrets that resolve on this machine (an operation that needs none of
    them still signs its notifications and masks them with these); the rest are left out
    (a receiver that needs one is said and left out)."""
    out = {}
    for name, ref in app.secrets.items():
        if not ref.from_accessory:
            with suppress(SecretUnavailable):
                out[name] = ref.resolve(environ)
    return out


def clearance_kinds(clearance: Clearance, taken: tuple[str, ...]) -> tuple[str, ...]:
    """What the operation was cleared with: ``confirm``, ``take-host``, ``take-over``,
    ``break-glass`` — in that order."""
    out = ["confirm"] if clearance.confirmed else []
    out += [t for t in ("take-host", "take-over") if t in taken]
    if clearance.break_glass is not None:
        out.append("break-glass")
    return tuple(out)


class Telling(EngineContext):
    """Emits an operation's own events; remembers the one under way so it ends once."""

    _begun: Started | None = None
    #: where the operation's own events go: the engine's sink, and its slot's notifier
    _told: Sink | None = None
    #: the last operation's notifier (tests wait on its messages)
    notifier: Notifier | None = None
    #: earlier operations this one recovered, told once it has started (its receivers known)
    _recoveries: tuple[Recovered, ...] = ()

    def _recovered(self, target: Target, stuck: list[Release], deployed: Release | None) -> None:
        """Earlier operations that died, resolved now: ``deployed`` recorded as deployed,
        every other one marked failed. Told after this operation's ``started``."""
        for release in stuck:
            ok = deployed is not None and release.revision == deployed.revision
            line = (
                f"r{release.revision} of {target}, left pending by an interrupted operation, "
                + ("runs whole: recorded deployed" if ok else "was marked failed")
            )
            told = Recovered(
                target.app,
                target.slot,
                release.revision,
                "deployed" if ok else "failed",
                line,
                release.audit,
            )
            self._recoveries = (*self._recoveries, told)

    def _begin(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        plan: Plan,
        taken: tuple[str, ...],
        secrets: Mapping[str, Secret],
    ) -> Audit:
        """``started`` and ``planned``: who acts (read now), under which clearance, and
        what the plan changes. Returns the audit its release records."""
        summary = plan.diff.summary() if plan.diff is not None else ""
        if not summary and plan.release is not None:
            summary = plan.release.description
        who = self._start(clearance, target, app, plan.operation, summary, taken, secrets)
        if not plan.unchanged:  # "no changes" is said by the outcome alone
            revision = plan.release.revision if plan.release is not None else None
            self._tell(Planned(plan.operation, revision, summary, tuple(plan.describe())))
        return who

    def _start(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        operation: str,
        summary: str,
        taken: tuple[str, ...],
        secrets: Mapping[str, Secret],
    ) -> Audit:
        """``started``: who acts (read now), under which clearance (a break-glass reason
        with it), doing what; its receivers attached. The recoveries it made follow."""
        who = replace(
            who_acts(app.source_dir, self.environ, operation),
            clearance=clearance_kinds(clearance, taken),
            break_glass=clearance.break_glass,
            summary=summary,
        )
        self._begun = Started(operation, target.app, target.slot, self.backend.name, who)
        self._told = self._notified(app, target.slot, secrets)
        self._tell(self._begun)
        for told in self._recoveries:
            self._tell(told)
        self._recoveries = ()
        return who

    @contextmanager
    def _telling(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        operation: str,
        summary: str,
        secrets: Mapping[str, Secret] | None = None,
    ) -> Iterator[None]:
        """An operation that records no release, told as a rollout is: ``started`` now,
        then the ``ended`` of the :class:`Done` the block gives :meth:`_done` — or, when the
        block stops on an error or a signal, an ``error`` (:meth:`_end_stopped`). Either
        way exactly one. ``secrets``: what its messages are masked with and signed by
        (default: the app's secrets that resolve here)."""
        own = reachable_secrets(app, self.environ) if secrets is None else secrets
        self._start(clearance, target, app, operation, summary, (), own)
        try:
            yield
        except BaseException as exc:
            self._end_stopped(exc, own)
            raise
        if self._begun is not None:  # a block that told no outcome: a bug, said as one
            self._end_stopped(RuntimeError(f"{operation} told no outcome"), own)

    def _done(self, done: Done) -> Done:
        """The ``ended`` event of an operation :meth:`_telling` began."""
        self._end(done)
        return done

    def _notified(self, app: App, slot: str, secrets: Mapping[str, Secret]) -> Sink:
        """The engine's sink, and a notifier when the slot declares receivers (one whose
        secret does not resolve here is said and left out)."""
        receivers = []
        for r in app.slots.get(slot).notify:
            missing = [n for n in (r.secret, r.url_secret) if n and n not in secrets]
            if missing:
                self.reporter.line(
                    f"warning: notifications to {r.shown()} are off: secret "
                    f"{missing[0]} is not available here"
                )
            else:
                receivers.append(r)
        if not receivers:
            self.notifier = None
            return self.events
        self.notifier = Notifier(
            receivers, secrets, Masker.of(secrets), self.reporter.line, budget=budget(self.environ)
        )
        return Fanout(self.events, self.notifier)

    def _tell(self, event: Event) -> None:
        (self._told or self.events).emit(event)

    @staticmethod
    def _audited(release: Release, who: Audit) -> Release:
        return replace(release, audit=who)

    def _end(self, outcome: Outcome | Done) -> None:
        begun, self._begun = self._begun, None
        self._tell(
            Ended(
                outcome.kind,
                outcome.exit_code,
                outcome.line(),
                tuple(outcome.details()),
                outcome.to_json(),
                app=begun.app if begun else "",
                slot=begun.slot if begun else "",
                operation=begun.operation if begun else "",
            )
        )

    def _end_stopped(self, exc: BaseException, secrets: Mapping[str, Secret]) -> None:
        """An operation that started and then stopped on an error or a signal ends too
        (``error``): the one message every started operation gets."""
        begun, self._begun = self._begun, None
        if begun is None:
            return
        code = exc.exit_code if isinstance(exc, (ShipwayError, Interrupted)) else 1
        what = f"interrupted by {exc}" if isinstance(exc, Interrupted) else str(exc)
        message = redact(what, secrets)
        self._tell(
            Ended(
                "error",
                code,
                f"{begun.operation} {begun.app}/{begun.slot} stopped: {message}",
                app=begun.app,
                slot=begun.slot,
                operation=begun.operation,
            )
        )
