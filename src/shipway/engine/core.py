"""The engine's verbs: plan and deploy, rollback, repair, restart one process type, stop
(and destroy, :mod:`.destroy`).

Each mutating verb checks its clearance first (``require_covers``, before the lock or any
read), then hands a plan builder and an undo to the shared sequence
(:mod:`shipway.engine.sequence`). The engine never knows which backend it drives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from shipway.backends.canary import canaries_of, canary_id, keeps_clients, refuse_unsplittable
from shipway.backends.protocol import (
    BuildInputs,
    LockHolder,
    ResolvedImage,
    drifts_of,
    sources_of,
)
from shipway.engine.accessories import accessory_plan
from shipway.engine.backups import Backups
from shipway.engine.blue_green import BlueGreen
from shipway.engine.build import builds_its_image, planned, refuse_source_build, with_build
from shipway.engine.context import marked
from shipway.engine.data_loss import WrittenInside, database_notes
from shipway.engine.destroy import Destruction
from shipway.engine.done import Done
from shipway.engine.freezing import Freezing
from shipway.engine.ids import fresh_ids, restart_ids
from shipway.engine.oneoff import OneOffs
from shipway.engine.outcome import Outcome
from shipway.engine.request import DeployRequest
from shipway.engine.sequence import Planned, Rollout
from shipway.engine.signals import signals_deferred, signals_raise
from shipway.engine.sources import Workloads
from shipway.engine.timeouts import DEFAULT_ROLLBACK_TIMEOUT, DEFAULT_TIMEOUT
from shipway.engine.walk import Walker
from shipway.errors import ImageMetadataMissing, InputError, SecretUnavailable, StalePlan
from shipway.guard import Clearance
from shipway.plan.canary import canary_steps
from shipway.plan.change import Diff
from shipway.plan.diff import drift, plan_diff
from shipway.plan.model import NoOp, Observed, Plan, changes_between
from shipway.plan.replica_canary import replica_steps, routed_replicas
from shipway.plan.rollout import restore_steps, rollout_plan, with_waits
from shipway.release import history
from shipway.release.artifact import Artifact
from shipway.release.model import ImageMeta, Release, ReleaseStatus
from shipway.spec.model import App, Target
from shipway.spec.parse import from_snapshot
from shipway.spec.secrets import Masker, Secret, placeholder

#: a deploy with no options: the spec's image, as the spec says
ASKED = DeployRequest()


class Engine(Workloads, BlueGreen, Destruction, OneOffs, Backups, Freezing):
    """Drives one backend for one app's slots. Knows nothing of which backend it drives."""

    def plan_deploy(
        self, app: App, slot_name: str, request: DeployRequest = ASKED, *, data: bool = True
    ) -> Plan:
        """What a deploy would do now, with what it changes. Mutates nothing. ``data``: say
        what the running release wrote inside itself, which the deploy would lose."""
        target = app.slots.target(slot_name)
        records = self.backend.read_records(target)
        observed = self.observe(target, records)
        secrets = self.secrets(app, slot_name, planning=True)
        plan = self._deploy_plan(app, slot_name, records, observed, secrets, request)
        if plan.release is None or request.operation != "deploy" or not data:
            return plan
        # what the running release wrote inside itself, which this deploy would lose (a
        # deploy says it once it rolled: engine/sequence.py)
        lost = WrittenInside(self.backend, target, history.deployed(records), app)
        warning = lost.warning(plan.release)
        if warning is None:
            return plan
        return replace(plan, notes=(*plan.notes, f"warning: {warning}"))

    def _deploy_plan(
        self,
        app: App,
        slot_name: str,
        records: Sequence[Release],
        observed: Observed,
        secrets: Mapping[str, Secret],
        request: DeployRequest,
    ) -> Plan:
        """The deploy plan, and what it changes against the deployed release and the
        target; its first step is the build phase when there is one. Nothing differs and
        not ``force``: the "no changes" plan, which applies (and builds) nothing — a deploy
        gives every process a fresh deployment id (and the new revision's number is in what
        it renders), so without this check every deploy of an unchanged slot would roll
        every process."""
        image, operation, description = request.image, request.operation, request.description
        app = secret_valued_env(app, secrets)
        slot = app.slots.get(slot_name)
        target = app.slots.target(slot_name)
        inputs: BuildInputs | None = None
        data_notes: list[str] = []
        # the accessories first: missing, down, or declared anew (never on a rollback)
        accessories = accessory_plan(self.backend, app, slot_name, request.upgrade_accessories)
        if slot.source is not None:  # the team's manifests or a chart (engine/sources.py)
            if request.build:
                raise refuse_source_build(slot_name)
            release = self._source_release(
                app, slot_name, records, secrets, image, operation, description, request.take_over
            )
        else:
            view = app.in_slot(slot_name)
            inputs = self._build_inputs(target, view, image, request.build)
            if inputs is not None and inputs.kind == "image":
                resolved = self._planned_image(view, inputs)
            else:
                resolved = self.backend.resolve_image(target, view, image)
            meta = self._image_meta(
                resolved, records, view, built_here=image is None and builds_its_image(view)
            )
            # a database in the directory a release is copied from: its copy is lost
            data_notes = database_notes(resolved.databases)
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
                build=planned(inputs) if inputs is not None else None,
            )
            release = marked(release, secrets, records)  # a source release is, to render

        def plan_of(seen: Observed) -> Plan:
            if slot.source is not None:  # rendered (read) already, by _source_release
                return rollout_plan(
                    operation=operation, backend=self.backend.name, release=release, observed=seen
                )
            return self._release_plan(app, slot_name, release, seen, operation, request.take_host)

        def diff_of(plan: Plan, seen: Observed) -> Diff:
            assert plan.release is not None
            # a source's objects included; no value a secret has is shown
            return plan_diff(anchor, plan.release, seen, Masker(secrets.values()))

        anchor = history.deployed(records)
        plan = plan_of(observed)
        diff = diff_of(plan, observed)
        if diff.empty and anchor is not None:
            # what observing cannot see (an object edited outside shipway) is looked for
            # before "no changes" is said; such units are applied again
            altered = self._altered(target, anchor, app, secrets)
            if altered:
                seen = observed.with_altered(altered)
                plan = plan_of(seen)
                diff = diff_of(plan, seen)
                plan = replace(plan, observed=observed.summary())  # what a saved plan checks
        if diff.empty and not request.force:
            plan = self._unchanged_plan(
                plan, diff, f"this {operation} would run what r{diff.before} runs"
                + (" (--force redeploys anyway)" if operation == "deploy" else ""),
            )  # fmt: skip
            # an accessory that is down is started, and the app is left as it runs: "no
            # changes" to the app, no revision (a stopped accessory rolled every process)
            steps = accessories.steps or plan.steps
            plan = replace(plan, steps=steps, notes=accessories.notes)
            return self._noted(plan, app, slot_name)
        plan = accessories.applied(replace(with_build(plan, inputs), diff=diff))
        if data_notes:
            plan = replace(plan, notes=(*plan.notes, *data_notes))
        return self._noted(plan, app, slot_name)

    def _release_plan(
        self,
        app: App,
        slot_name: str,
        release: Release,
        observed: Observed,
        operation: str,
        take_host: bool,
    ) -> Plan:
        """The steps that make the target run ``release``: a new generation on a
        blue-green slot, a rollout otherwise."""
        slot = app.slots.get(slot_name)
        if slot.strategy == "blue-green":
            return self._generation_plan(app, slot_name, release, observed, operation, take_host)
        view = app.in_slot(slot_name)
        target = app.slots.target(slot_name)
        self._claim_hosts(self.backend, target, self.backend.hosts(view, slot), take_host)
        release = replace(release, artifact=self.backend.render(view, slot, release))
        plan = rollout_plan(
            operation=operation,
            backend=self.backend.name,
            release=release,
            observed=observed,
            release_command=view.release_command,
            batch=slot.batch,
            release_timeout=view.release_deadline,
        )
        if slot.canary is None:
            return plan
        refuse_unsplittable(self.backend, target)  # nothing to split or count: exit 2
        if slot.canary.split == "replicas":  # no router: the share is the canary's pods
            stable = routed_replicas(view)
            steps, notes = replica_steps(plan.steps, release.artifact, slot.canary, stable)
            return replace(plan, steps=tuple(steps), notes=(*plan.notes, *notes))
        sticky = keeps_clients(self.backend, target)
        steps, why_not = canary_steps(plan.steps, release.artifact, slot.canary, sticky=sticky)
        notes = [why_not] if why_not else slot.canary.rules()
        return replace(plan, steps=tuple(steps), notes=(*plan.notes, *notes))

    def _altered(
        self, target: Target, anchor: Release, app: App, secrets: Mapping[str, Secret]
    ) -> list[str]:
        """The anchor's units the target no longer runs as recorded, where the backend can
        tell more than observing does (:class:`~shipway.backends.protocol.Drifts`)."""
        drifts = drifts_of(self.backend)
        if drifts is None:
            return []
        return drifts.altered(target, anchor, self._secrets_of(anchor, app, secrets))

    @staticmethod
    def _unchanged_plan(plan: Plan, diff: Diff, reason: str) -> Plan:
        """ "No changes": one no-op step, no release to record."""
        return replace(plan, steps=(NoOp(reason=reason),), release=None, diff=diff)

    def changes(self, app: App, slot_name: str) -> Diff:
        """The deployed release against what a deploy would run now, and where the target
        drifted from it. Read-only."""
        diff = self.plan_deploy(app, slot_name, data=False).diff
        assert diff is not None  # every deploy plan carries its diff
        return diff

    def _image_meta(
        self,
        resolved: ResolvedImage,
        records: Sequence[Release],
        app: App,
        ref: str | None = None,
        digest: str | None = None,
        built_here: bool = False,
    ) -> ImageMeta:
        """Invariant 5: the image itself (inspected on an engine, or its config read from
        its registry), else the recorded release of that image, else the type the spec
        declares, else a clear error — never a silent default. ``built_here``: the image
        is the one the app's own Dockerfile builds (no --image given), so the way out is
        to build it (--build) or to name one that exists (--image REF)."""
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
        hint = (
            f"hint: shipway builds this app's image from {app.build.dockerfile}: pass --build "
            "to build and push it first, or --image REF to deploy an image that exists"
            if built_here
            else "hint: push the image to the registry it names, make it available to a "
            'Docker engine, or declare app.image_type = "dockerfile" | "herokuish" | "pack" '
            "in the spec"
        )
        raise ImageMetadataMissing(
            f"cannot tell what kind of image {ref} is: no reachable Docker engine has it to "
            f"inspect, its registry could not be read{registry}, and no recorded release of "
            f"this slot ran it ({hint})"
        )

    def deploy(
        self, clearance: Clearance, app: App, slot_name: str, request: DeployRequest = ASKED
    ) -> Outcome:
        """Roll out what the spec (or the request's image, or its saved plan) says. When
        nothing differs from the deployed release and the target matches it, nothing is
        applied and no revision recorded (:class:`Unchanged`), unless ``request.force``."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        slot = app.slots.get(slot_name)
        blue_green = slot.strategy == "blue-green"
        if blue_green:
            self._generations()  # refused before the lock: nothing is created or touched
        if slot.canary is not None:
            canaries_of(self.backend)  # the same: refused before anything is touched
        if slot.source is not None:  # a source that can only be compared: refused here
            refusal = sources_of(self.backend).undeployable(app, slot)
            if refusal is not None:
                raise InputError(refusal)
        # an accessory's credentials are made here, once (before the lock: whoever makes
        # them first, the others read them)
        secrets = self.secrets(app, slot_name, clearance)
        saved = request.saved
        request.check_saved(slot_name)
        if saved is not None and (saved.app, saved.slot, saved.backend) != (
            target.app,
            target.slot,
            self.backend.name,
        ):
            raise InputError(
                f"the saved plan is for {saved.app}/{saved.slot} ({saved.backend}), "
                f"not {target} ({self.backend.name})"
            )

        def make_plan(records: list[Release], observed: Observed) -> Plan:
            if saved is None:
                return self._deploy_plan(app, slot_name, records, observed, secrets, request)
            changes = changes_between(saved.observed, observed.summary())
            if changes:
                raise StalePlan(changes)
            if slot.source is not None and saved.release is not None:
                # objects of other owners are not in the observed state: asked again, and
                # taken only with --take-over given now
                sources_of(self.backend).claim(
                    target, saved.release.artifact, request.take_over, self.reporter
                )
            return saved

        undo = self._sleep_new if blue_green else self._restore_anchor
        return self._rollout(
            clearance, target, app, secrets, make_plan, undo, request.timeout,
            request.rollback_timeout, check_data=True, taken=request.taken(),
        )  # fmt: skip

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
        secrets = self.secrets(app, slot_name)
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
            plan = rollout_plan(
                operation="rollback",
                backend=self.backend.name,
                release=release,
                observed=observed,
                batch=app.slots.get(slot_name).batch,
            )
            warned = self._rollback_warnings(records, source)
            if warned:
                plan = replace(plan, notes=(*plan.notes, *warned))
            return self._noted(plan, from_snapshot(source.spec, app.source_dir), slot_name)

        return self._rollout(
            clearance, target, app, secrets, build, self._restore_anchor, timeout, rollback_timeout
        )

    @staticmethod
    def _rollback_warnings(records: Sequence[Release], source: Release) -> list[str]:
        """What a rollback to ``source`` must say first: that it failed when it was
        deployed (it is rolled back to all the same: the user named it), or that it runs
        the very code and config the slot runs now (the deployed release restarted it)."""
        out = []
        if source.status == ReleaseStatus.FAILED:
            out.append(
                f"warning: r{source.revision} failed when it was deployed "
                f"({source.description or 'no reason recorded'}); rolling back to it "
                "anyway: it may fail again"
            )
        anchor = history.deployed(records)
        passed = [
            r
            for r in history.ordered(records)
            if anchor is not None
            and r.status == ReleaseStatus.SUPERSEDED
            and source.revision < r.revision < anchor.revision
            and _same_code(anchor, r)
        ]
        if anchor is not None and passed:
            which = ", ".join(f"r{r.revision}" for r in reversed(passed))
            out.append(
                f"rolling back to r{source.revision}, past {which}: "
                f"{'they run' if len(passed) > 1 else 'it runs'} the same code and config as "
                f"the deployed r{anchor.revision} (going back there would change nothing but "
                "restart it)"
            )
        if anchor is not None and _same_code(anchor, source):
            out.append(
                f"warning: r{source.revision} runs the same code and config as the deployed "
                f"r{anchor.revision} ({anchor.description}): this rollback changes nothing "
                "but restarts it (hint: shipway history SLOT; rollback SLOT REVISION)"
            )
        return out

    @staticmethod
    def _rollback_source(records: Sequence[Release], revision: int | None) -> Release:
        """``revision``, or the last successful release before the deployed one that runs
        other code or config than it (a restart runs the same: going back to the release
        it restarted would change nothing)."""
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
        other = [r for r in earlier if anchor is None or not _same_code(anchor, r)]
        if other:
            return other[-1]
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
        try:
            secrets = self.secrets(app, slot_name)
        except SecretUnavailable:  # a plan of a repair needs none: unresolved ones are
            secrets = {}  # compared by their keys only
        return self._repair_plan(app, slot_name, records, self.observe(target, records), secrets)

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
        secrets = self.secrets(app, slot_name)

        def build(records: list[Release], observed: Observed) -> Plan:
            if saved is None:
                return self._repair_plan(app, slot_name, records, observed, secrets)
            changes = changes_between(saved.observed, observed.summary())
            if changes:
                raise StalePlan(changes)
            return saved

        return self._rollout(
            clearance, target, app, secrets, build, self._restore_anchor, timeout, rollback_timeout
        )

    def finish_canary(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    ) -> Outcome:
        """Promote a canary its deploy left behind (killed): under the lock, the pending
        release whose canary the proxy still runs is rolled to 100 % as its own deploy would
        have — its route applied (the switch), the stable drained and removed — and recorded
        deployed; a step that fails puts the deployed release back (``rolled-back``)."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        secrets = self.secrets(app, slot_name)
        canaries = canaries_of(self.backend)
        with (
            signals_raise(),
            self.backend.lock(clearance, target, LockHolder.me(self.lock_ttl), self.reporter),
        ):
            records = self.backend.read_records(target)
            counts = canaries.canary_counts(target)
            stuck = [
                r for r in history.pending(records) if counts and canary_id(r) == counts.canary
            ]
            if not stuck:
                raise InputError(
                    f"no canary is left behind in slot {slot_name!r} to promote (hint: shipway "
                    f"canary status {slot_name})"
                )
            release, anchor = stuck[-1], history.deployed(records)
            observed = self.observe(target, records).of_generation(None)
            own = self._secrets_of(release, app, secrets)
            walker = Walker(self.backend, clearance, target, release, own, self.reporter)
            plan = Plan(app.name, slot_name, self.backend.name, "canary promote",
                        tuple(with_waits(restore_steps(release.artifact, observed),
                                         release.artifact)), observed.summary(),
                        release)  # fmt: skip
            release = self._audited(release, self._begin(clearance, target, app, plan, (), own))
            try:
                result = walker.run(plan.steps, timeout)
                if result.ok:
                    with signals_deferred(self.reporter.line):  # never cut the record in half
                        rolled = self._succeed(
                            clearance, target, app, records, release, anchor, result
                        )
                        return self._settled(rolled)
                run = Rollout(
                    clearance, target, app, secrets, self._restore_anchor, rollback_timeout
                )
                planned = Planned(
                    records, anchor, plan, walker, self._secrets_of(anchor, app, secrets), None
                )
                return self._settled(self._fail_and_undo(run, planned, release, result))
            except BaseException as exc:  # a started operation ends once, even so
                self._end_stopped(exc, own)
                raise

    def _repair_plan(
        self,
        app: App,
        slot_name: str,
        records: Sequence[Release],
        observed: Observed,
        secrets: Mapping[str, Secret],
    ) -> Plan:
        anchor = history.deployed(records)
        if anchor is None:
            raise InputError(
                f"nothing is deployed in slot {slot_name!r} to repair (hint: shipway deploy first)"
            )
        release = self._successor(anchor, records, f"repair: re-assert r{anchor.revision}")
        # a blue-green slot: the live generation only (the others are kept, not drift)
        seen = observed.of_generation(anchor.generation)
        if not drift(anchor, seen):
            seen = seen.with_altered(
                self._altered(app.slots.target(slot_name), anchor, app, secrets)
            )
        plan = rollout_plan(
            operation="repair",
            backend=self.backend.name,
            release=release,
            observed=seen,
            batch=app.slots.get(slot_name).batch,
        )
        diff = Diff(anchor.revision, None, tuple(drift(anchor, seen)))
        plan = replace(plan, observed=observed.summary(), diff=diff)  # saved: the whole slot
        if diff.empty:
            why = f"the target runs r{anchor.revision} as recorded"
            return self._unchanged_plan(plan, diff, why)
        return self._noted(plan, from_snapshot(anchor.spec, app.source_dir), slot_name)

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
        if app.slots.get(slot_name).source is not None:
            raise InputError(
                f"restart rolls shipway's own processes, and slot {slot_name!r} takes its "
                f"objects from a source (hint: shipway deploy {slot_name}, or set-image)"
            )
        secrets = self.secrets(app, slot_name)

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
        plan = rollout_plan(
            operation="restart",
            backend=self.backend.name,
            release=release,
            observed=observed.of_generation(anchor.generation),
            batch=app.slots.get(slot_name).batch,
        )
        return self._noted(plan, recorded, slot_name)

    def stop(self, clearance: Clearance, app: App, slot_name: str) -> Done:
        """Stop what runs in a slot, under its lock. Records stay: the deployed release is
        still the anchor, and a deploy or restart brings it back."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        holder = LockHolder.me(self.lock_ttl)
        with (
            signals_raise(),
            self.backend.lock(clearance, target, holder, self.reporter),
            self._telling(clearance, target, app, "stop", "stop every process"),
        ):
            self.backend.stop(clearance, target, self.reporter)
            line = f"stopped {target}; its release records stay (shipway history)"
            return self._done(Done("stop", str(target), line, {"stopped": str(target)}))


def secret_valued_env(app: App, secrets: Mapping[str, Secret]) -> App:
    """``app`` with every plain env value (``[env]``, env files, a slot's ``env``) that
    equals a secret's value written as that secret's placeholder (``${secrets.NAME}``): the
    process gets the same value (a backend substitutes placeholders as it writes), while
    plans, saved plans, records and diffs hold the placeholder, never the value."""
    by_value: dict[str, str] = {}
    for name in sorted(app.secrets):
        value = secrets[name].reveal() if name in secrets else ""
        if value:
            by_value.setdefault(value, name)
    if not by_value:
        return app

    def hidden(env: Mapping[str, str]) -> dict[str, str]:
        return {k: placeholder(by_value[v]) if v in by_value else v for k, v in env.items()}

    slots = {n: replace(s, env=hidden(s.env)) for n, s in app.slots.slots.items()}
    return replace(app, env=hidden(app.env), slots=replace(app.slots, slots=slots))


def _same_code(anchor: Release, earlier: Release) -> bool:
    """Whether the deployed release is a restart of ``earlier``'s code and config: a
    restart's record and the release it restarted (only a restart is judged so: a
    source slot's spec names its manifests, not what they hold)."""
    if not anchor.description.startswith("restart"):
        return False
    mine = (anchor.digest or anchor.image, anchor.config_hash, dict(anchor.spec))
    return mine == (earlier.digest or earlier.image, earlier.config_hash, dict(earlier.spec))
