"""What every part of the engine shares: the backend it drives, where it reports, who acts,
and the few primitives every operation uses (observing with the records' head, the
secrets a recorded release refers to, a successor revision, marking a release failed).

The engine is one class assembled from one module per concern, each a layer on the one
before: ``context`` → ``recovery`` (undo and the recovery of an interrupted deploy) →
``sequence`` (the shared lock → anchor → pending → walk → record sequence) → ``blue_green``
(generations) → ``core`` (the verbs: deploy, rollback, repair, restart, stop).
"""

from __future__ import annotations

import contextlib
import getpass
import secrets as _random
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from shipway.backends.protocol import Backend, Reporter, report_retries_to
from shipway.engine.accessories import accessory_secrets
from shipway.engine.walk import WalkResult
from shipway.errors import BackendError, InputError, SecretUnavailable
from shipway.events.sink import Saying, Sink, as_sink
from shipway.guard import Clearance
from shipway.plan.model import Observed, Plan, Step
from shipway.release import history
from shipway.release.model import Release, ReleaseStatus, SecretMarks, now_utc
from shipway.spec.model import App, Target
from shipway.spec.parse import from_snapshot
from shipway.spec.secrets import Secret, resolve_all
from shipway.spec.tls import certificate_notes

Build = Callable[[list[Release], Observed], Plan]
Undo = Callable[[Target, WalkResult, Release | None], list[Step]]


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def head_of(records: Sequence[Release]) -> str:
    if not records:
        return "none"
    top = max(records, key=lambda r: r.revision)
    return f"r{top.revision}:{top.status}"


def marked(release: Release, secrets: Mapping[str, Secret], records: Sequence[Release]) -> Release:
    """``release`` with the marks of the secret values it runs with (those its spec refers
    to), under the salt the slot's records share (a new one for a new slot). The marks let
    a diff name which secret changed; they are never shown."""
    salt = (
        next(
            (r.secret_marks.salt for r in history.ordered(records)[::-1] if r.secret_marks.salt),
            "",
        )
        # a new slot's: the one this release drew when it was planned (a source's Secret
        # data is named under it), else a new one
        or release.secret_marks.salt
        or _random.token_hex(16)
    )
    names = (release.spec or {}).get("secrets") or {}
    marks = {name: secrets[name].mark(salt) for name in names if name in secrets}
    return replace(release, secret_marks=SecretMarks(salt, marks))


class EngineContext:
    """The backend, where events go, the actor, and the primitives every operation uses.

    ``reporter``: an event sink (events/sink.py: the command line's reporter is one), or a
    plain line reporter, given every event rendered as lines. ``events`` is where the engine
    emits; ``reporter`` says lines and progress (the backends') as events on it."""

    def __init__(
        self,
        backend: Backend,
        reporter: Reporter | Sink | None = None,
        *,
        actor: str | None = None,
        lock_ttl: float = 60.0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.backend = backend
        self.events: Sink = as_sink(reporter)
        self.reporter: Reporter = Saying(self.events)
        if reporter is not None:
            report_retries_to(backend, self.reporter)
        self.actor = actor or default_actor()
        self.lock_ttl = lock_ttl
        self.environ = environ

    def observe(self, target: Target, records: Sequence[Release]) -> Observed:
        seen = self.backend.observe(target)
        return Observed(seen.units, head=head_of(records))

    def _successor(self, source: Release, records: Sequence[Release], description: str) -> Release:
        """A new pending revision running what ``source`` ran (rollback, repair, restart,
        switch): same image, spec and artifact, this actor, now."""
        return replace(
            source,
            revision=history.next_revision(records),
            status=ReleaseStatus.PENDING,
            description=description,
            created_at=now_utc(),
            updated_at=now_utc(),
            actor=self.actor,
        )

    def secrets(
        self,
        app: App,
        slot_name: str | None = None,
        clearance: Clearance | None = None,
        *,
        planning: bool = False,
    ) -> dict[str, Secret]:
        """The values of the app's secrets: its references resolved here, and (given the
        slot) its accessories' links, read from the slot — made there first when a
        ``clearance`` is given (a deploy; :mod:`.accessories`)."""
        values = resolve_all(app.secrets, self.environ)
        if slot_name is not None and app.accessories:
            values.update(accessory_secrets(self.backend, app, slot_name, clearance, planning))
        return values

    def _secrets_of(
        self, release: Release | None, app: App, secrets: Mapping[str, Secret]
    ) -> dict[str, Secret]:
        """The secrets a recorded release refers to: its own spec's references (those that
        resolve here), then the current spec's for the rest — a release deployed before a
        secret left the spec still gets it back when it is restored."""
        if release is None or not release.spec:
            return dict(secrets)
        try:
            recorded = from_snapshot(release.spec, app.source_dir).secrets
        except InputError:  # a snapshot this version cannot read: the current references
            return dict(secrets)
        own = {}
        for name, ref in recorded.items():
            with contextlib.suppress(SecretUnavailable):
                own[name] = ref.resolve(self.environ)
        return {**secrets, **own}

    def _noted(self, plan: Plan, app: App, slot_name: str) -> Plan:
        """The plan with its volumes said: each one the slot holds (where, size on disk),
        then what the backend cannot promise because of them. ``app`` is the spec the plan
        runs (a recorded one for a rollback or restart); one that declares no volume costs
        no look (``status`` lists every volume the slot still holds)."""
        slot = app.slots.get(slot_name)
        # the certificates its routes ask for (spec/tls.py; none where no route asks)
        https = certificate_notes(
            app.in_slot(slot_name).routes, slot.acme, [h.url for h in slot.hosts]
        )
        plan = replace(plan, notes=(*plan.notes, *https)) if https else plan
        if not app.volumes:
            return plan
        target = app.slots.target(slot_name)
        found = self.backend.volumes(target)
        notes = [f"volume {v.line()}" for v in found]
        notes += self.backend.volume_notes(app.in_slot(slot_name), app.slots.get(slot_name), plan)
        return replace(plan, notes=(*plan.notes, *notes)) if notes else plan

    def _fail(self, clearance: Clearance, target: Target, release: Release, why: str) -> None:
        self.backend.write_records(
            clearance, target, [release.with_status(ReleaseStatus.FAILED, why)]
        )

    def _mark_failed(
        self, clearance: Clearance, target: Target, release: Release, why: str
    ) -> str | None:
        """Record ``release`` failed, as :meth:`_fail` does — but a record that cannot be
        written (the backend already retried it) never stops the undo that must follow: it
        is said, and returned as why the record is behind (None: it was written)."""
        try:
            self._fail(clearance, target, release, why)
        except BackendError as exc:
            self.reporter.line(
                f"warning: could not record r{release.revision} as failed ({exc}); "
                "undoing it all the same"
            )
            return str(exc)
        return None
