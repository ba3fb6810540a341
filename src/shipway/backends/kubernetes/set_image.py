"""``set-image`` on a workload shipway did not render: the seed's core rollout on an
existing Deployment, StatefulSet, DaemonSet or CronJob of the slot's namespace.

The container's current image is read first (the anchor); the step patches that
container's image and nothing else (a strategic-merge patch, field manager ``shipway``);
the wait judges the workload by its kind's rule with the pods running the new image as its
new revision (the same fail-fast signals as a Deployment's); the undo is the same patch
with the anchor's image. What must never happen: a set-image on an object shipway applies
itself (the next deploy would put its own image back) — that is refused with the command
that does it properly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.readiness import RULES
from shipway.backends.kubernetes.rollout import Judge, Verdict, Watched, readiness_window
from shipway.backends.kubernetes.source_waits import SourceWaits
from shipway.backends.kubernetes.sources import SOURCE_SLOT, TEMPLATE_PATHS, containers_of
from shipway.backends.kubernetes.watch import LiveSet
from shipway.backends.protocol import Failure, Reporter
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.plan.model import SetImage, WaitImage
from shipway.spec.model import Target
from shipway.spec.source import ContainerRef

SET_IMAGE_KINDS: Mapping[str, str] = {
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "CronJob": "batch/v1",
}


class SourceSetImage(SourceWaits):
    """The protocol's ``workload_image``, ``set_image`` and ``wait_image``: a workload
    found through discovery and watched as a source's objects are."""

    def _workload(self, kind: str, name: str) -> dict[str, Any]:
        api_version = SET_IMAGE_KINDS.get(kind)
        if api_version is None:
            raise InputError(
                f"set-image rolls a Deployment, StatefulSet, DaemonSet or CronJob, not a {kind}"
            )
        served = self._served({"apiVersion": api_version, "kind": kind})
        with self.state._edge(f"reading {kind}/{name}"):
            try:
                return dict(
                    self.state.client.get(
                        served.resource, name, namespace=self.state.namespace
                    ).to_dict()
                )
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
        raise InputError(
            f"no {kind} {name} in namespace {self.state.namespace} (hint: the slot's namespace; "
            "check the name)"
        )

    def workload_image(self, target: Target, ref: ContainerRef) -> tuple[str, str]:
        self.state._serves(target)
        obj = self._workload(ref.kind, ref.name)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if SOURCE_SLOT in labels or labels.get(render.MANAGED_BY) == render.MANAGER:
            raise InputError(
                f"{ref.workload} is applied by shipway itself; the next deploy would put its "
                "image back (hint: shipway deploy SLOT --image REF, with the source's "
                "image_containers naming it)"
            )
        containers = containers_of(obj)
        names = [str(c.get("name")) for c in containers]
        if ref.container is None:
            main = (_template_spec(obj).get("containers")) or []
            if len(main) != 1:
                raise InputError(
                    f"{ref.workload} has {len(main)} containers ({', '.join(names)}): name one "
                    f"(hint: {ref.workload}:{names[-1] if names else 'CONTAINER'})"
                )
            chosen = main[0]
        else:
            found = [c for c in containers if c.get("name") == ref.container]
            if not found:
                raise InputError(
                    f"{ref.workload} has no container {ref.container} (containers: "
                    f"{', '.join(names) or 'none'})"
                )
            chosen = found[0]
        return str(chosen.get("name")), str(chosen.get("image"))

    def set_image(
        self, clearance: Clearance, target: Target, step: SetImage, reporter: Reporter
    ) -> None:
        self.state._guard(clearance, target)
        kind, name = render.split_key(step.workload)
        obj = self._workload(kind, name)
        self._image_watches(step.workload, kind, name, obj)  # before the patch
        init = any(
            c.get("name") == step.container for c in _template_spec(obj).get("initContainers") or []
        )
        patch: dict[str, Any] = {
            "initContainers" if init else "containers": [
                {"name": step.container, "image": step.image}
            ]
        }
        for part in reversed((*TEMPLATE_PATHS[kind], "spec")):
            patch = {part: patch}
        served = self._served({"apiVersion": SET_IMAGE_KINDS[kind], "kind": kind})
        with self.state._edge(f"setting the image of {step.workload}:{step.container}"):
            applied = self.state.client.patch(
                served.resource,
                name,
                patch,
                namespace=self.state.namespace,
                patch_type=PatchType.STRATEGIC,
                field_manager=render.MANAGER,
            )
        live = applied.to_dict()
        self.state._generations[step.workload] = int(
            (live.get("metadata") or {}).get("generation") or 0
        )

    def wait_image(
        self, target: Target, step: WaitImage, deadline: float, reporter: Reporter
    ) -> Failure | None:
        self.state._serves(target)
        kind, name = render.split_key(step.workload)
        if kind == "CronJob":  # its Jobs run the new image on its schedule
            return None
        watches = self._src().image_watches.get(step.workload)
        if watches is None:
            watches = self._image_watches(step.workload, kind, name, self._workload(kind, name))
        objects, pods = watches
        obj = objects.objects.get(name) or {}
        spec = obj.get("spec") or {}
        watched = Watched(
            process=step.workload,
            deployment=name,
            template="",
            replicas=int(spec.get("replicas", 1) or 1),
            generation=self.state._generations.get(step.workload),
            readiness_window=readiness_window(obj, self.state.tuning),
            match_component=False,
            image=(step.container, step.image),
        )
        judge = Judge(
            watched,
            self.state.tuning,
            pods.initial,
            before=objects.initial.get(name),
            rule=RULES[kind],
        )

        def assess(snap: tuple[dict[str, Any] | None, list[dict[str, Any]]], now: float) -> Verdict:
            return judge.assess(snap[0], snap[1], now)

        return self._watch_until(
            target, step.workload, name, objects, pods, assess, deadline, reporter
        )

    def _image_watches(
        self, workload: str, kind: str, name: str, obj: Mapping[str, Any]
    ) -> tuple[LiveSet, LiveSet]:
        """The workload and its pods (by its selector), watched once per operation."""
        src = self._src()
        if workload not in src.image_watches:
            served = self._served({"apiVersion": SET_IMAGE_KINDS[kind], "kind": kind})
            selector = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or None
            loop = self.state._watch_loop()
            objects = LiveSet(
                loop,
                served.resource,
                self.state.namespace,
                src.changes,
                fields={"metadata.name": name},
            )
            pods = LiveSet(loop, Pod, self.state.namespace, src.changes, labels=selector)
            with self.state._edge(f"watching {workload}"):
                objects.start()
                try:
                    pods.start()
                except BaseException:
                    objects.stop()
                    raise
            src.image_watches[workload] = (objects, pods)
        return src.image_watches[workload]


def _template_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    node: Any = obj
    for part in TEMPLATE_PATHS.get(str(obj.get("kind")), ()):
        node = (node or {}).get(part) or {}
    return dict((node or {}).get("spec") or {})
