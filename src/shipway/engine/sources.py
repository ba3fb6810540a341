"""Slots whose objects come from a source (the team's manifests, a chart), and set-image on
a workload shipway did not render. Both go through the one rollout sequence: lock → anchor
→ pending record → walk → record, or undo → one of the four outcomes.

What must never happen here:
  * a deploy of a source that cannot be rendered — a chart without Helm's SDK is refused
    before the lock, with the fix (``Engine.deploy``); ``plan`` still compares it;
  * objects another manager owns taken silently — the backend's ``claim`` refuses them
    unless ``--take-over``, before anything is written;
  * a set-image without its anchor — the container's current image is read first, under
    the lock, and the undo puts exactly that image back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from shipway.backends.protocol import sources_of
from shipway.engine.context import marked
from shipway.engine.outcome import Outcome
from shipway.engine.sequence import RolloutSequence
from shipway.engine.timeouts import DEFAULT_ROLLBACK_TIMEOUT, DEFAULT_TIMEOUT
from shipway.engine.walk import WalkResult
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.plan.change import Diff
from shipway.plan.model import NoOp, Observed, Plan, SetImage, Step, WaitImage
from shipway.release import history
from shipway.release.model import Release, ReleaseStatus
from shipway.spec.model import App, Target
from shipway.spec.secrets import Secret
from shipway.spec.source import ContainerRef


class Workloads(RolloutSequence):
    """Source slots' plans, and set-image."""

    def _source_release(
        self,
        app: App,
        slot_name: str,
        records: Sequence[Release],
        secrets: Mapping[str, Secret],
        image: str | None,
        operation: str,
        description: str,
        take_over: bool,
    ) -> Release:
        """The release a deploy of a slot whose objects come from its source would record:
        its objects rendered (read) by the backend and claimed (nothing someone else owns
        is taken without ``take_over``). ``image`` (else the spec's, when the source names
        containers for it) replaces the image of the source's ``image_containers``."""
        sb = sources_of(self.backend)
        slot = app.slots.get(slot_name)
        source = slot.source
        assert source is not None
        view = app.in_slot(slot_name)
        target = app.slots.target(slot_name)
        if image is not None and not source.image_containers:
            raise InputError(
                f"--image sets the image of the containers slot {slot_name!r}'s source names, "
                'and it names none (hint: image_containers = ["Deployment/web"] in '
                f"[slots.{slot_name}.source])"
            )
        chosen = image or (app.image if source.image_containers else None)
        resolved = sb.resolve_image(target, view, chosen) if chosen else None
        release = Release(
            app=app.name,
            slot=slot_name,
            revision=history.next_revision(records),
            status=ReleaseStatus.PENDING,
            image=resolved.ref if resolved else None,
            digest=resolved.digest if resolved else None,
            spec=view.snapshot(slot),
            config_hash=view.config_hash(secrets),
            description=description
            or f"{operation} {source.describe()}" + (f" with {resolved.ref}" if resolved else ""),
            actor=self.actor,
        )
        if view.volumes:
            self.reporter.line(
                f"note: the app's volumes ({', '.join(sorted(view.volumes))}) are not mounted "
                f"on slot {slot_name!r}: its objects come from a source (hint: declare a "
                "PersistentVolumeClaim in the source and mount it there)"
            )
        if view.release_command:
            self.reporter.line(
                f"note: the release command is not run on slot {slot_name!r}: its objects come "
                "from a source (hint: make it a Job of the source)"
            )
        # marked first: the source's Secret data is named under the slot's secret-mark salt
        release = marked(release, secrets, records)
        release = replace(release, artifact=sb.render(view, slot, release))
        sb.claim(target, release.artifact, take_over, self.reporter)
        return release

    def set_image(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        ref: ContainerRef,
        image: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    ) -> Outcome:
        """Roll one container of a workload shipway did not render to ``image``: its
        current image read first (the anchor), a patch of that image only, the fail-fast
        wait, the anchor put back on failure; recorded in the slot's history as a new
        revision (the deployed release's objects, unchanged, with this description)."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        sb = sources_of(self.backend)
        slot = app.slots.get(slot_name)
        anchor_image: list[SetImage] = []

        def build(records: list[Release], observed: Observed) -> Plan:
            container, was = sb.workload_image(target, ref)
            where = f"{ref.workload}:{container}"
            text = f"set-image {where} {image} (was {was})"
            deployed = history.deployed(records)
            if deployed is not None:
                release = self._successor(deployed, records, text)
            else:
                release = Release(
                    app=app.name,
                    slot=slot_name,
                    revision=history.next_revision(records),
                    status=ReleaseStatus.PENDING,
                    spec=app.in_slot(slot_name).snapshot(slot),
                    description=text,
                    actor=self.actor,
                )
            steps: tuple[Step, ...]
            if was == image and deployed is not None:  # "no changes": no revision either
                return Plan(
                    app=app.name,
                    slot=slot_name,
                    backend=sb.name,
                    operation="set-image",
                    steps=(NoOp(reason=f"{where} already runs {image}"),),
                    observed=observed.summary(),
                    diff=Diff(deployed.revision, None, ()),
                )
            if was == image:
                steps = (NoOp(reason=f"{where} already runs {image}"),)
            else:
                step = SetImage(workload=ref.workload, container=container, image=image, was=was)
                anchor_image.append(step)
                steps = (step, WaitImage(workload=ref.workload, container=container, image=image))
            return Plan(
                app=app.name,
                slot=slot_name,
                backend=sb.name,
                operation="set-image",
                steps=steps,
                observed=observed.summary(),
                release=release,
            )

        def undo(_: Target, done: WalkResult, __: Release | None) -> list[Step]:
            if not anchor_image:
                return []
            s = anchor_image[0]
            back = SetImage(workload=s.workload, container=s.container, image=s.was, was=s.image)
            return [back, WaitImage(workload=s.workload, container=s.container, image=s.was)]

        def restores() -> str:
            if not anchor_image:
                return ""
            s = anchor_image[0]
            return f"{s.workload}:{s.container} on {s.was}"

        return self._rollout(
            clearance, target, app, {}, build, undo, timeout, rollback_timeout, restores=restores
        )
