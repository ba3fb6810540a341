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

import contextlib
import getpass
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from shipway.backends.protocol import (
    Backend,
    Failure,
    GenerationBackend,
    GenerationInfo,
    LockHolder,
    NullReporter,
    Reason,
    Reporter,
    ResolvedImage,
    generations_of,
)
from shipway.engine.ids import fresh_ids, restart_ids
from shipway.engine.outcome import NoAnchor, Outcome, RollbackFailed, Rolled, RolledBack
from shipway.engine.signals import Interrupted, signals_deferred, signals_raise
from shipway.engine.walk import Walker, WalkResult
from shipway.errors import (
    BackendError,
    HostTaken,
    ImageMetadataMissing,
    InputError,
    SecretUnavailable,
    ShipwayError,
    StalePlan,
)
from shipway.guard import Clearance
from shipway.plan.generation import switch_plan, switch_steps
from shipway.plan.model import (
    ApplyObject,
    DropHost,
    Observed,
    Plan,
    PointHost,
    Scale,
    Step,
    WaitReplicas,
    changes_between,
)
from shipway.plan.rollout import discard_steps, restore_steps, rollout_plan
from shipway.release import history
from shipway.release.artifact import Artifact
from shipway.release.model import ImageMeta, Release, ReleaseStatus, now_utc
from shipway.spec.model import App, Target
from shipway.spec.parse import from_snapshot
from shipway.spec.secrets import Secret, redact, resolve_all

DEFAULT_TIMEOUT = 300.0
DEFAULT_ROLLBACK_TIMEOUT = 300.0

Build = Callable[[list[Release], Observed], Plan]
Undo = Callable[[Target, WalkResult, Release | None], list[Step]]


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def live_generation(gens: Sequence[GenerationInfo]) -> str | None:
    return next((g.name for g in gens if g.state == "live"), None)


def new_generation_name(slot: str, gens: Sequence[GenerationInfo]) -> str:
    """``<slot>-<YYYYMMDD-HHMMSS>`` (UTC), unique among the slot's generations."""
    from datetime import UTC, datetime

    base = f"{slot[:40]}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    taken = {g.name for g in gens}
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def head_of(records: Sequence[Release]) -> str:
    if not records:
        return "none"
    top = max(records, key=lambda r: r.revision)
    return f"r{top.revision}:{top.status}"


class Engine:
    """Drives one backend for one app's slots. Knows nothing of which backend it drives."""

    def __init__(
        self,
        backend: Backend,
        reporter: Reporter | None = None,
        *,
        actor: str | None = None,
        lock_ttl: float = 60.0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.backend = backend
        self.reporter = reporter or NullReporter()
        self.actor = actor or default_actor()
        self.lock_ttl = lock_ttl
        self.environ = environ

    # -- reading ---------------------------------------------------------------------

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

    def secrets(self, app: App) -> dict[str, Secret]:
        return resolve_all(app.secrets, self.environ)

    # -- planning (read-only: no lock, no mutation, no subprocess) ---------------------

    def plan_deploy(
        self,
        app: App,
        slot_name: str,
        *,
        image: str | None = None,
        operation: str = "deploy",
        description: str = "",
        take_host: bool = False,
    ) -> Plan:
        target = app.slots.target(slot_name)
        records = self.backend.read_records(target)
        observed = self.observe(target, records)
        return self._deploy_plan(
            app,
            slot_name,
            records,
            observed,
            self.secrets(app),
            image,
            operation,
            description,
            take_host,
        )

    def _deploy_plan(
        self,
        app: App,
        slot_name: str,
        records: Sequence[Release],
        observed: Observed,
        secrets: Mapping[str, Secret],
        image: str | None,
        operation: str,
        description: str,
        take_host: bool = False,
    ) -> Plan:
        slot = app.slots.get(slot_name)
        view = app.in_slot(slot_name)
        target = app.slots.target(slot_name)
        resolved = self.backend.resolve_image(target, view, image)
        meta = self._image_meta(resolved, records, view)
        release = Release(
            app=app.name,
            slot=slot_name,
            revision=history.next_revision(records),
            status=ReleaseStatus.PENDING,
            image=resolved.ref,
            digest=resolved.digest,
            image_meta=meta,
            deployment_ids=fresh_ids(view.processes),
            spec=view.snapshot(slot),
            config_hash=view.config_hash(secrets),
            description=description or f"{operation} {resolved.ref}",
            actor=self.actor,
        )
        if slot.strategy == "blue-green":
            return self._generation_plan(app, slot_name, release, observed, operation, take_host)
        release = replace(release, artifact=self.backend.render(view, slot, release))
        return rollout_plan(
            operation=operation,
            backend=self.backend.name,
            release=release,
            observed=observed,
            release_command=view.release_command,
        )

    # -- generations (blue/green) ----------------------------------------------------

    def _generations(self) -> GenerationBackend:
        return generations_of(self.backend)

    def generations(self, app: App, slot_name: str) -> list[GenerationInfo]:
        return self._generations().generations(app.slots.target(slot_name))

    def _generation_plan(
        self,
        app: App,
        slot_name: str,
        release: Release,
        observed: Observed,
        operation: str,
        take_host: bool,
    ) -> Plan:
        """A deploy to a blue-green slot: the release becomes a new generation beside the
        live one; hosts move only once it is ready."""
        gb = self._generations()
        slot = app.slots.get(slot_name)
        view = app.in_slot(slot_name)
        target = app.slots.target(slot_name)
        gens = gb.generations(target)
        release = replace(release, generation=new_generation_name(slot_name, gens))
        release = replace(release, artifact=gb.render(view, slot, release))
        steps = switch_steps(
            to_generation=release.generation or "",
            from_generation=live_generation(gens),
            replicas={name: p.replicas for name, p in view.processes.items()},
            hosts=self._claim_hosts(gb, target, gb.hosts(view, slot), take_host),
            release=release,
            observed=observed,
            sleep_delay=slot.sleep_after,
            release_command=view.release_command,
        )
        return switch_plan(
            app=app.name,
            slot=slot_name,
            backend=gb.name,
            observed=observed,
            steps=steps,
            release=release,
            operation=operation,
        )

    def _claim_hosts(
        self,
        gb: GenerationBackend,
        target: Target,
        hosts: list[tuple[str, str]],
        take_host: bool,
    ) -> list[tuple[str, str]]:
        """Refuse a host another app or slot serves, unless told to take it."""
        for host, _ in hosts:
            owner = gb.host_owner(target, host)
            if owner is None or (owner.app, owner.slot) == (target.app, target.slot):
                continue
            if not take_host:
                raise HostTaken(host, str(owner))
            self.reporter.line(f"taking host {host} from {owner} (--take-host)")
        return hosts

    def switch_to(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        generation: str,
        *,
        take_host: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    ) -> Outcome:
        """Switch the slot back (or forth) to a kept generation: wake → wait → point →
        drop → the live one goes to sleep. Recorded as a new revision."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        secrets = self.secrets(app)
        gb = self._generations()

        def build(records: list[Release], observed: Observed) -> Plan:
            gens = gb.generations(target)
            source = self._generation_release(records, gens, generation)
            recorded = from_snapshot(source.spec, app.source_dir)
            live = live_generation(gens)
            slot = app.slots.get(slot_name)
            release = self._successor(
                source,
                records,
                f"switch to {generation} (r{source.revision})"
                + (f"; {live} goes to sleep" if live and live != generation else ""),
            )
            steps = switch_steps(
                to_generation=generation,
                from_generation=live,
                replicas={name: p.replicas for name, p in recorded.processes.items()},
                hosts=self._claim_hosts(gb, target, gb.hosts(recorded, slot), take_host),
                sleep_delay=slot.sleep_after,
            )
            return switch_plan(
                app=app.name,
                slot=slot_name,
                backend=gb.name,
                observed=observed,
                steps=steps,
                release=release,
            )

        return self._rollout(
            clearance, target, app, secrets, build, self._sleep_new, timeout, rollback_timeout
        )

    @staticmethod
    def _generation_release(
        records: Sequence[Release], gens: Sequence[GenerationInfo], generation: str
    ) -> Release:
        names = [g.name for g in gens]
        if generation not in names:
            raise InputError(
                f"no generation {generation!r} in this slot (have: {', '.join(names) or 'none'})"
            )
        ran = [
            r
            for r in history.ordered(records)
            if r.generation == generation
            and r.status in (ReleaseStatus.DEPLOYED, ReleaseStatus.SUPERSEDED)
        ]
        if not ran:
            raise InputError(f"generation {generation!r} never went live: nothing to switch to")
        return ran[-1]

    def sleep(self, clearance: Clearance, app: App, slot_name: str, generation: str) -> None:
        """Scale an asleep-to-be generation to zero. The live one is refused."""
        self._scale_generation(clearance, app, slot_name, generation, wake=False)

    def wake(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        generation: str,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        """Scale a generation back to its replicas and wait until it is ready (no traffic)."""
        self._scale_generation(clearance, app, slot_name, generation, wake=True, timeout=timeout)

    def _scale_generation(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        generation: str,
        *,
        wake: bool,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        gb = self._generations()
        holder = LockHolder.me(self.lock_ttl)
        with signals_raise(), gb.lock(clearance, target, holder, self.reporter):
            records = gb.read_records(target)
            gens = gb.generations(target)
            source = self._generation_release(records, gens, generation)
            if not wake and generation == live_generation(gens):
                raise InputError(f"generation {generation!r} is live: switch to another one first")
            processes = from_snapshot(source.spec, app.source_dir).processes
            steps: list[Step] = [
                Scale(process=n, replicas=p.replicas if wake else 0, generation=generation)
                for n, p in processes.items()
            ]
            if wake:
                steps += [
                    WaitReplicas(process=n, replicas=p.replicas, generation=generation)
                    for n, p in processes.items()
                ]
            result = Walker(gb, clearance, target, source, {}, self.reporter).run(steps, timeout)
            if result.failure is not None:
                raise BackendError(result.failure.headline())

    def gc(self, clearance: Clearance, app: App, slot_name: str, keep: int) -> list[str]:
        """Delete asleep generations beyond the ``keep`` newest; never the live one."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        gb = self._generations()
        holder = LockHolder.me(self.lock_ttl)
        with signals_raise(), gb.lock(clearance, target, holder, self.reporter):
            # the backend lists oldest first (its clock may tie two generations made in
            # one second, its order does not): all but the ``keep`` newest asleep ones go
            asleep = [g for g in gb.generations(target) if g.state == "asleep"]
            doomed = asleep[: max(len(asleep) - max(keep, 0), 0)]
            for gen in doomed:
                self.reporter.line(f"deleting asleep generation {gen.name}")
                gb.delete_generation(clearance, target, gen.name, self.reporter)
            return [g.name for g in doomed]

    def _image_meta(
        self,
        resolved: ResolvedImage,
        records: Sequence[Release],
        app: App,
        ref: str | None = None,
        digest: str | None = None,
    ) -> ImageMeta:
        """Invariant 5: the image itself (inspected on an engine, or its config read from
        its registry), else the recorded release of that image, else the type the spec
        declares, else a clear error — never a silent default."""
        if resolved.meta is not None:
            return resolved.meta
        ref = ref or resolved.ref
        digest = digest or resolved.digest
        for record in sorted(records, key=lambda r: -r.revision):
            same = record.image == ref or (digest is not None and record.digest == digest)
            if same and record.image_meta is not None:
                return record.image_meta
        if app.image_type is not None:
            return ImageMeta(source_type=app.image_type)
        registry = f" ({resolved.unknown_because})" if resolved.unknown_because else ""
        raise ImageMetadataMissing(
            f"cannot tell what kind of image {ref} is: no reachable Docker engine has it to "
            f"inspect, its registry could not be read{registry}, and no recorded release of "
            "this slot ran it (hint: push the image to the registry it names, make it "
            'available to a Docker engine, or declare app.image_type = "dockerfile" | '
            '"herokuish" | "pack" in the spec)'
        )

    # -- mutating --------------------------------------------------------------------

    def deploy(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        *,
        image: str | None = None,
        saved: Plan | None = None,
        operation: str = "deploy",
        description: str = "",
        take_host: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    ) -> Outcome:
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        blue_green = app.slots.get(slot_name).strategy == "blue-green"
        if blue_green:
            self._generations()  # refused before the lock: nothing is created or touched
        secrets = self.secrets(app)
        if saved is not None and (image is not None or take_host):
            flag = "--image" if image is not None else "--take-host"
            raise InputError(
                f"a saved plan is applied exactly as it was made: it takes no {flag} "
                f"(hint: make a new one: shipway plan {slot_name} {flag}"
                f"{' REF' if image is not None else ''} --out FILE)"
            )
        if saved is not None and (saved.app, saved.slot, saved.backend) != (
            target.app,
            target.slot,
            self.backend.name,
        ):
            raise InputError(
                f"the saved plan is for {saved.app}/{saved.slot} ({saved.backend}), "
                f"not {target} ({self.backend.name})"
            )

        def build(records: list[Release], observed: Observed) -> Plan:
            if saved is None:
                return self._deploy_plan(
                    app,
                    slot_name,
                    records,
                    observed,
                    secrets,
                    image,
                    operation,
                    description,
                    take_host,
                )
            changes = changes_between(saved.observed, observed.summary())
            if changes:
                raise StalePlan(changes)
            return saved

        undo = self._sleep_new if blue_green else self._restore_anchor
        return self._rollout(
            clearance, target, app, secrets, build, undo, timeout, rollback_timeout
        )

    def rollback(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        revision: int | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    ) -> Outcome:
        """Re-apply the stored artifact of ``revision`` (default: the one before the
        deployed one) as a NEW revision, through the same health-gated path. On a blue-green
        slot this switches back to that revision's generation."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        secrets = self.secrets(app)
        if app.slots.get(slot_name).strategy == "blue-green":
            source = self._rollback_source(self.backend.read_records(target), revision)
            if source.generation is None:
                raise InputError(f"r{source.revision} ran in no generation: nothing to switch to")
            return self.switch_to(
                clearance,
                app,
                slot_name,
                source.generation,
                timeout=timeout,
                rollback_timeout=rollback_timeout,
            )

        def build(records: list[Release], observed: Observed) -> Plan:
            source = self._rollback_source(records, revision)
            release = self._successor(source, records, f"rollback to r{source.revision}")
            return rollout_plan(
                operation="rollback", backend=self.backend.name, release=release, observed=observed
            )

        return self._rollout(
            clearance, target, app, secrets, build, self._restore_anchor, timeout, rollback_timeout
        )

    @staticmethod
    def _rollback_source(records: Sequence[Release], revision: int | None) -> Release:
        if revision is not None:
            found = history.find(records, revision)
            if found is None:
                have = ", ".join(f"r{r.revision}" for r in history.ordered(records)) or "none"
                raise InputError(f"no revision {revision} in the history (have: {have})")
            return found
        anchor = history.deployed(records)
        earlier = [
            r
            for r in history.ordered(records)
            if r.status == ReleaseStatus.SUPERSEDED
            and (anchor is None or r.revision < anchor.revision)
        ]
        if not earlier:
            raise InputError(
                "there is no earlier successful release to roll back to "
                "(hint: shipway history SLOT lists the revisions)"
            )
        return earlier[-1]

    def plan_repair(self, app: App, slot_name: str) -> Plan:
        """What a repair would do now. Mutates nothing, starts nothing."""
        target = app.slots.target(slot_name)
        records = self.backend.read_records(target)
        return self._repair_plan(slot_name, records, self.observe(target, records))

    def repair(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        *,
        saved: Plan | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    ) -> Outcome:
        """Re-assert the deployed release exactly as recorded, as a NEW revision: only what
        drifted changes (a stopped unit is started, a missing one created, an altered one
        replaced, an undeclared one removed); what matches is left alone. A deploy, by
        contrast, always rolls every process to fresh deployment ids."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        secrets = self.secrets(app)

        def build(records: list[Release], observed: Observed) -> Plan:
            if saved is None:
                return self._repair_plan(slot_name, records, observed)
            changes = changes_between(saved.observed, observed.summary())
            if changes:
                raise StalePlan(changes)
            return saved

        return self._rollout(
            clearance, target, app, secrets, build, self._restore_anchor, timeout, rollback_timeout
        )

    def _repair_plan(self, slot_name: str, records: Sequence[Release], observed: Observed) -> Plan:
        anchor = history.deployed(records)
        if anchor is None:
            raise InputError(
                f"nothing is deployed in slot {slot_name!r} to repair (hint: shipway deploy first)"
            )
        release = self._successor(anchor, records, f"repair: re-assert r{anchor.revision}")
        plan = rollout_plan(
            operation="repair",
            backend=self.backend.name,
            release=release,
            # a blue-green slot: the live generation only (the others are kept, not drift)
            observed=observed.of_generation(anchor.generation),
        )
        return replace(plan, observed=observed.summary())  # a saved plan: the whole slot

    def restart(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        process: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    ) -> Outcome:
        """Restart one process type (or all): only its workloads get a fresh deployment id;
        every other unit is taken byte-for-byte from the deployed release."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        secrets = self.secrets(app)

        def build(records: list[Release], observed: Observed) -> Plan:
            anchor = history.deployed(records)
            if anchor is None:
                raise InputError(
                    f"nothing is deployed in slot {slot_name!r} to restart "
                    "(hint: shipway deploy first)"
                )
            return self._restart_plan(app, slot_name, anchor, records, observed, process)

        return self._rollout(
            clearance, target, app, secrets, build, self._restore_anchor, timeout, rollback_timeout
        )

    def _restart_plan(
        self,
        app: App,
        slot_name: str,
        anchor: Release,
        records: Sequence[Release],
        observed: Observed,
        process: str | None,
    ) -> Plan:
        recorded = from_snapshot(anchor.spec, app.source_dir)
        names = list(recorded.processes)
        if process is not None and process not in names:
            raise InputError(
                f"no process {process!r} in r{anchor.revision} (processes: {', '.join(names)})"
            )
        targets = {process} if process else set(names)
        target = app.slots.target(slot_name)
        resolved = self.backend.resolve_image(target, recorded, anchor.image)
        meta = self._image_meta(resolved, records, recorded, anchor.image, anchor.digest)
        release = replace(
            self._successor(anchor, records, f"restart {process or 'all processes'}"),
            image_meta=meta,
            deployment_ids=restart_ids(anchor.deployment_ids, names, targets),
        )
        fresh = self.backend.render(recorded, app.slots.get(slot_name), release)
        kept = [u for u in anchor.artifact if u.process not in targets]
        renewed = [u for u in fresh if u.process in targets]
        release = replace(release, artifact=Artifact(tuple(kept + renewed)))
        return rollout_plan(
            operation="restart",
            backend=self.backend.name,
            release=release,
            observed=observed.of_generation(anchor.generation),
        )

    def stop(self, clearance: Clearance, app: App, slot_name: str) -> None:
        """Stop what runs in a slot, under its lock. Records stay: the deployed release is
        still the anchor, and a deploy or restart brings it back."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        holder = LockHolder.me(self.lock_ttl)
        with signals_raise(), self.backend.lock(clearance, target, holder, self.reporter):
            self.backend.stop(clearance, target, self.reporter)

    # -- the shared sequence ---------------------------------------------------------

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
    ) -> Outcome:
        holder = LockHolder.me(self.lock_ttl)
        with signals_raise(), self.backend.lock(clearance, target, holder, self.reporter):
            records = self.backend.read_records(target)
            records = self._recover(clearance, target, app, records, secrets, rollback_timeout)
            anchor = history.deployed(records)  # the anchor: read before anything is patched
            observed = self.observe(target, records)
            plan = build(records, observed)
            release = plan.release
            if release is None:
                raise InputError("the plan records no release")
            for line in plan.describe():
                self.reporter.line(line)
            walker = Walker(self.backend, clearance, target, release, secrets, self.reporter)
            # what undoes this release: the anchor, with the secrets its own spec refers to
            back_secrets = self._secrets_of(anchor, app, secrets)
            try:
                # inside the try: a signal landing between the pending record and the first
                # step is handled like any other interruption
                self.backend.write_records(clearance, target, [release])
                result = walker.run(plan.steps, timeout)
            except BaseException as exc:
                # a signal, or an error no step turned into a failure: undone like a failed
                # rollout, so the slot never keeps serving what its history calls failed
                why = (
                    f"interrupted by {exc}"
                    if isinstance(exc, Interrupted)
                    else f"stopped by an error: {redact(str(exc), secrets)}"
                )
                self._fail(clearance, target, release, why)
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
                raise
            if result.ok:
                with signals_deferred(self.reporter.line):  # never cut the record in half
                    return self._succeed(clearance, target, app, records, release, anchor, result)
            assert result.failure is not None
            failure = result.failure
            self._fail(clearance, target, release, failure.headline())
            for line in failure.lines():
                self.reporter.line(line)
            label = f"rollback to r{anchor.revision} " if anchor else "cleanup "
            back = self._walk_back(
                clearance, target, anchor or release, back_secrets, undo, result, anchor,
                rollback_timeout, label,
            )  # fmt: skip
            warnings = tuple(result.warnings + back.warnings)
            if anchor is None:
                return NoAnchor(str(target), release.revision, failure, warnings)
            if back.ok:
                return RolledBack(str(target), release.revision, anchor.revision, failure, warnings)
            assert back.failure is not None
            return RollbackFailed(
                str(target), release.revision, anchor.revision, failure, back.failure, warnings
            )

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
        down."""
        walker = Walker(self.backend, clearance, target, release, secrets, self.reporter)
        try:
            steps = undo(target, done, anchor)
            if steps:
                self.reporter.line(f"{label.strip()}: {len(steps)} steps")
            return walker.run(steps, timeout, label)
        except ShipwayError as exc:
            failed = walker.result
            failed.failure = Failure(
                reason=Reason.UNDO_FAILED,
                message=f"{label.strip()}: {redact(str(exc), secrets)}",
                process=getattr(failed.current, "process", None),
            )
            return failed

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
        self.backend.write_records(clearance, target, written)
        warnings = list(result.warnings)
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

    def _fail(self, clearance: Clearance, target: Target, release: Release, why: str) -> None:
        self.backend.write_records(
            clearance, target, [release.with_status(ReleaseStatus.FAILED, why)]
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

    def _sleep_new(self, target: Target, result: WalkResult, anchor: Release | None) -> list[Step]:
        """Undo for a generation switch: put back what this switch moved.

        Hosts it already pointed at the new generation go back to the anchor's generation
        (woken and waited on first, as in any switch) — or, with no anchor, are dropped —
        before anything is put to sleep: a generation is never stopped under its traffic.
        Then every process the switch woke goes back to sleep: scaled up, or applied (a
        backend may start what it applies), including the step under way when it stopped.
        A point that failed left its host where it was (pointing is the backend's one
        atomic move), but a point *interrupted* (a signal: the walk stopped with no failure)
        may have moved its host before the signal landed: that host goes back too —
        pointing a host back where it already is changes nothing, while a moved host left
        on a generation about to sleep would be an outage.
        """
        attempted = [*result.done, *([result.current] if result.current else [])]
        woken: dict[tuple[str, str], None] = {}
        for s in attempted:
            wakes = (isinstance(s, Scale) and s.replicas > 0) or isinstance(s, ApplyObject)
            if wakes and isinstance(s, Scale | ApplyObject) and s.generation and s.process:
                woken[(s.generation, s.process)] = None
        pointed: dict[str, str] = {}
        moved_to: str | None = None
        interrupted = result.current if result.failure is None else None
        for s in [*result.done, *([interrupted] if interrupted else [])]:
            if isinstance(s, PointHost) and s.generation:
                pointed[s.host] = s.process
                moved_to = s.generation
        steps: list[Step] = []
        back_to = anchor.generation if anchor is not None else None
        if pointed and anchor is not None and back_to is not None and back_to != moved_to:
            recorded = from_snapshot(anchor.spec, Path("."))
            switch_back = switch_steps(
                to_generation=back_to,
                from_generation=moved_to,
                replicas={name: p.replicas for name, p in recorded.processes.items()},
                hosts=list(pointed.items()),
            )
            steps += [s for s in switch_back if not (isinstance(s, Scale) and s.replicas == 0)]
        elif pointed and moved_to is not None:
            steps += [DropHost(host=host, generation=moved_to) for host in pointed]
        steps += [
            Scale(process=process, replicas=0, generation=generation)
            for generation, process in woken
            if generation != back_to
        ]
        return steps

    def _reassert_steps(
        self, target: Target, records: Sequence[Release], anchor: Release, stuck: Release
    ) -> list[Step]:
        """Steps that make the anchor what runs and serves again."""
        if anchor.generation is None:
            observed = self.observe(target, records)
            return restore_steps(anchor.artifact, observed.of_generation(None))
        gb = self._generations()
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
        """Invariant 10: a pending release found under our (fresh) lock belongs to a deploy
        that died. Mark it failed and put the anchor back, saying so."""
        stuck = history.pending(records)
        if not stuck:
            return records
        for release in stuck:
            self.reporter.line(
                f"recovering: r{release.revision} was left pending by an interrupted operation "
                f"({release.actor}, {release.created_at})"
            )
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
        return self.backend.read_records(target)
