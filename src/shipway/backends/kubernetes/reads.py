"""What the Kubernetes backend reads: the image, the slot's objects, records, status, the
diff a plan would make, logs and the digest that runs. Nothing here mutates anything.

The diff comes from a server-side dry run (what the API server would make of each object)
and never shows a Secret's data: keys are listed, values masked, and a changed value is
told only through the config hash. Logs pass through the slot's masker.
"""

from __future__ import annotations

import base64
import copy
import difflib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx2
import yaml
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Pod

from shipway.backends.kubernetes import generations as gens
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.claims import KubernetesClaims
from shipway.backends.kubernetes.state import RESOURCES, api_message, short
from shipway.backends.protocol import ProcessStatus, Reporter, ResolvedImage
from shipway.errors import InputError
from shipway.plan.model import (
    ApplyObject,
    Observed,
    ObservedUnit,
    Plan,
    PointHost,
    Remove,
    UnitState,
)
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import Release
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import MASK

# What ``observe`` lists (by label) and may prune, in the order it lists them; then the
# claims (never pruned: a plan keeps every volume).
OBSERVED_KINDS = ("Secret", "ConfigMap", "Deployment", "Service", "Ingress")
CLAIMS = "PersistentVolumeClaim"
VOLATILE_METADATA = (
    "managedFields",
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "selfLink",
)


class KubernetesReads(KubernetesClaims):
    """The protocol's reads (and the records' read), each refusing a target it does not
    serve. Where a slot's objects come from a source, each says so in one branch and asks
    the source part (``self.source``)."""

    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        """Shipway's own render of the spec (pure), or, on a source slot, its source's
        objects (the source part reads the manifests or renders the chart)."""
        if slot.source is not None:
            return self.source.render(app, slot, release)
        return render.render(app, slot, release)

    def undeployable(self, app: App, slot: Slot) -> str | None:
        return self.source.undeployable(app, slot)

    def claim(
        self, target: Target, artifact: Artifact, take_over: bool, reporter: Reporter
    ) -> None:
        self._serves(target)
        self.source.claim(artifact, take_over, reporter)

    def resolve_image(self, target: Target, app: App, ref: str | None) -> ResolvedImage:
        chosen = ref or app.image
        if not chosen:
            raise InputError(
                f"slot {target.slot!r} runs on Kubernetes and needs an image "
                '(hint: set app.image = "registry/app:tag" in the spec, or pass --image)'
            )
        from shipway.backends.kubernetes import image

        return image.resolve(chosen)

    def observe(self, target: Target) -> Observed:
        """Shipway's own objects, by its labels — on a source slot only while its history
        holds some (to prune them), and without the Namespace (a source slot's namespace
        is the Lease's, never an object to prune) — and the source's objects the slot's
        history holds (the source part lists them)."""
        self._serves(target)
        units: list[ObservedUnit] = []
        if self.source.observe_rendered():
            units = self._observe_rendered(target)
            if self.slot.source is not None:
                units = [u for u in units if u.kind != "Namespace"]
        return Observed.of(units + self.source.observe(target))

    def _observe_rendered(self, target: Target) -> list[ObservedUnit]:
        units: list[ObservedUnit] = []
        namespace = self._observe_namespace()
        if namespace is not None:
            units.append(namespace)
        others: dict[tuple[str, str], Mapping[str, str]] = {}
        mine = self._labels()
        with self._edge(f"listing the objects of {target} in namespace {self.namespace}"):
            listed = []
            for kind in OBSERVED_KINDS:
                # every app's objects here (shipway's), to see a name another app holds
                for obj in self.client.list(
                    RESOURCES[kind],
                    namespace=self.namespace,
                    labels={render.MANAGED_BY: render.MANAGER},
                ):
                    labels = obj.metadata.labels or {}
                    if any(labels.get(k) != v for k, v in mine.items()):
                        others[(kind, str(obj.metadata.name))] = labels
                    else:
                        listed.append((kind, obj))
            listed += [(CLAIMS, claim) for claim in self._claims().values()]
            if self.app.volumes:  # another app's (or slot's) claim of the same name
                for claim in self.client.list(
                    RESOURCES[CLAIMS],
                    namespace=self.namespace,
                    labels={render.MANAGED_BY: render.MANAGER},
                ):
                    labels = claim.metadata.labels or {}
                    if any(labels.get(k) != v for k, v in mine.items()):
                        others[(CLAIMS, str(claim.metadata.name))] = labels
            for kind, obj in listed:
                meta = obj.metadata
                labels = meta.labels or {}
                units.append(
                    ObservedUnit(
                        key=render.unit_key(kind, meta.name),
                        kind=kind,
                        digest=(meta.annotations or {}).get(render.DIGEST),
                        state=_state(kind, obj),
                        process=labels.get(render.COMPONENT),
                        generation=labels.get(render.GENERATION),
                        phase=render.PHASES[kind],
                    )
                )
        self._refuse_taken_names(others)
        return units

    def _refuse_taken_names(self, others: Mapping[tuple[str, str], Mapping[str, str]]) -> None:
        """Refuse (exit 2, before anything is written) a spec whose objects would be given
        a name another app's object in this namespace has: applying it would overwrite
        that app's object."""
        view = self.app.in_slot(self.slot.name)
        clashes = []
        for (kind, name), what in render.object_names(view).items():
            theirs = others.get((kind, name))
            if theirs is None:
                continue
            instance = theirs.get(render.INSTANCE, "")
            app = theirs.get(render.NAME, "?")
            slot = instance.removeprefix(f"{app}-") if instance.startswith(f"{app}-") else "?"
            clashes.append(f"{kind} {name} (for {what}) is app {app}'s, slot {slot}")
        if clashes:
            raise InputError(
                f"in namespace {self.namespace}, objects of app {self.app.name} would take "
                f"the names of another app's: {'; '.join(clashes)} — applying them would "
                "overwrite that app's objects (names join the app's name with a process's "
                "or a host's: 'shop' + 'web-api' and 'shop-web' + 'api' are both "
                "'shop-web-api') (hint: rename the process, the route's host or the app, "
                "or give this slot a namespace of its own)"
            )

    def _observe_namespace(self) -> ObservedUnit | None:
        unit = render.namespace_unit(self.namespace)
        with self._edge(f"reading namespace {self.namespace}"):
            try:
                ns = self.client.get(Namespace, self.namespace)
            except ApiError as exc:
                if exc.status.code == 404:
                    return None
                if exc.status.code != 403:
                    raise
                # A namespace-scoped identity cannot read its Namespace; it exists (that
                # identity was granted rights in it) and is someone else's to manage.
                return ObservedUnit(unit.key, "Namespace", unit.digest, "present", phase=0)
        digest = (ns.metadata.annotations or {}).get(render.DIGEST) if ns.metadata else None
        return ObservedUnit(unit.key, "Namespace", digest, "present", phase=0)

    def read_records(self, target: Target) -> list[Release]:
        self._serves(target)
        with self._edge(f"reading the release records of {target}"):
            records = self._store().read()
        self.source.records_read(records)
        return records

    def status(self, target: Target) -> list[ProcessStatus]:
        self._serves(target)
        if self.slot.source is not None:
            return self.source.status(target, self.read_records(target))
        out = []
        with self._edge(f"reading the Deployments of {target}"):
            deployments = list(
                self.client.list(Deployment, namespace=self.namespace, labels=self._labels())
            )
        for dep in deployments:
            d = dep.to_dict()
            spec, st = d.get("spec", {}), d.get("status") or {}
            labels = d["metadata"].get("labels", {})
            process = labels.get(render.COMPONENT, d["metadata"]["name"])
            annotations = spec.get("template", {}).get("metadata", {}).get("annotations", {})
            out.append(
                ProcessStatus(
                    process=process,
                    desired=spec.get("replicas", 0),
                    ready=st.get("readyReplicas", 0),
                    generation=labels.get(render.GENERATION),
                    detail={
                        "updated": st.get("updatedReplicas", 0),
                        "available": st.get("availableReplicas", 0),
                        "deployment_id": annotations.get(render.DEPLOYMENT_ID),
                        "image": spec.get("template", {})
                        .get("spec", {})
                        .get("containers", [{}])[0]
                        .get("image"),
                    },
                )
            )
        return sorted(out, key=lambda s: (s.generation or "", s.process))

    # -- the diff ------------------------------------------------------------------

    def diff(self, target: Target, plan: Plan) -> list[str]:
        """How each object the plan applies would change, from a server-side dry run;
        Secret values masked. Read-only."""
        self._serves(target)
        if plan.release is None:
            return []
        if self.source.holds(plan.release):
            return self.source.diff(plan, rendered=self._diff_apply)
        lines: list[str] = []
        for step in plan.steps:
            if isinstance(step, ApplyObject):
                lines += self._diff_apply(plan.release.artifact.get(step.unit))
            elif isinstance(step, Remove):
                lines.append(f"- {step.unit} (would be removed: {step.reason})")
            elif isinstance(step, PointHost):
                name = render.ingress_name(self.app.name, step.host)
                with self._edge(f"reading Ingress {name}"):
                    live = self._live("Ingress", name)
                was = gens.routes_to(live.to_dict()) if live is not None else None
                before = (
                    f"generation {was}" if was else "the rolling release" if live else "nothing"
                )
                lines.append(
                    f"~ Ingress/{name}: {step.host} from {before} to generation {step.generation}"
                )
        return lines

    def _diff_apply(self, unit: Unit) -> list[str]:
        kind, name = render.split_key(unit.key)
        with self._edge(f"diffing {unit.key}"):
            live = self._live(kind, name)
            desired = render.with_digest(unit)
            if live is None:
                return [f"+ {unit.key} (new)", *_indent(_yaml(_masked(desired)), "+   ")]
            before = comparable(live.to_dict())
            if kind == "Secret":
                return [f"~ {unit.key}", *_secret_diff(before, desired)]
            merged = self.client.apply(from_dict(desired), force=True, dry_run=True)
            after = comparable(merged.to_dict())
        out = list(
            difflib.unified_diff(
                _yaml(before).splitlines(),
                _yaml(after).splitlines(),
                fromfile=f"{unit.key} (live)",
                tofile=f"{unit.key} (planned)",
                lineterm="",
                n=2,
            )
        )
        return [f"~ {unit.key}", *_indent(out[2:], "    ")] if out else [f"= {unit.key}"]

    # -- what runs -----------------------------------------------------------------

    def logs(self, target: Target, process: str | None, follow: bool, lines: int) -> Iterator[str]:
        self._serves(target)
        masked = self._masker()

        labels = self._labels()
        if process:
            labels[render.COMPONENT] = process
        with self._edge(f"listing the pods of {target}"):
            pods = [
                p.metadata.name
                for p in self.client.list(Pod, namespace=self.namespace, labels=labels)
            ]
        for pod in pods if not follow else pods[:1]:
            try:
                for line in self.client.log(
                    pod, namespace=self.namespace, tail_lines=lines, follow=follow
                ):
                    yield masked(f"{pod}: {line.rstrip()}")
            except ApiError as exc:
                yield masked(f"{pod}: no logs: {short(api_message(exc))}")
            except httpx2.HTTPError as exc:
                yield masked(f"{pod}: no logs: {short(str(exc))}")

    def live_digest(self, target: Target, release: Release) -> str | None:
        """The digest the Deployments run: from their image references (shipway pins them
        to the digest), else from the running containers' image IDs. A source slot: what
        the containers its source names for ``--image`` run (the source part reads it)."""
        self._serves(target)
        if self.slot.source is not None:
            return self.source.live_digest(release)
        labels: dict[str, Any] = self._labels()
        if release.generation:  # the generation that runs the release, not its neighbours
            labels[render.GENERATION] = release.generation
        with self._edge(f"reading the Deployments of {target}"):
            deployments = list(
                self.client.list(Deployment, namespace=self.namespace, labels=labels)
            )
            digests: set[str] = set()
            for dep in deployments:
                for c in dep.spec.template.spec.containers if dep.spec else []:
                    if c.image and "@" in c.image:
                        digests.add(str(c.image).split("@", 1)[1])
            if not digests and deployments:
                for pod in self.client.list(Pod, namespace=self.namespace, labels=labels):
                    for cs in (pod.status.containerStatuses or []) if pod.status else []:
                        if cs.imageID and "@" in cs.imageID:
                            digests.add(str(cs.imageID).split("@", 1)[1])
        if not digests:
            return None
        if len(digests) == 1:
            return digests.pop()
        others = sorted(d for d in digests if d != release.digest)
        return others[0]

    def runtime_files(self, target: Target, release: Release) -> list[str] | None:
        """Cannot tell: what a pod wrote in its container's own filesystem is the kubelet's
        to know (no API reads it), and a pod's filesystem goes with the pod anyway
        (docs/kubernetes.md says so: declare a volume for data)."""
        self._serves(target)
        return None


# -- pure helpers of the reads -----------------------------------------------------------


def _state(kind: str, obj: Any) -> UnitState:
    """A Deployment scaled to zero (``shipway stop``) is stopped: the next rollout applies
    it again (``start``) even where nothing else changed."""
    if kind != "Deployment":
        return "present"
    return "stopped" if obj.spec is not None and obj.spec.replicas == 0 else "running"


def comparable(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    meta = out.get("metadata", {})
    for key in VOLATILE_METADATA:
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    annotations.pop("deployment.kubernetes.io/revision", None)
    if not annotations:
        meta.pop("annotations", None)
    return out


def _masked(body: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(body))
    if out.get("kind") == "Secret":
        for key in ("data", "stringData"):
            if key in out:
                out[key] = {k: MASK for k in out[key]}
    return out


def _secret_diff(live: Mapping[str, Any], desired: Mapping[str, Any]) -> list[str]:
    """Key by key, values never shown: added, removed, changed (when it can be told
    without a secret value), and the config hash, which moves when any value does."""
    before = {
        k: base64.b64decode(v).decode(errors="replace") for k, v in (live.get("data") or {}).items()
    }
    after = dict(desired.get("stringData") or desired.get("data") or {})
    lines = []
    for key in sorted(set(before) | set(after)):
        if key not in before:
            lines.append(f"    + {key}: {MASK}")
        elif key not in after:
            lines.append(f"    - {key}: {MASK}")
        elif "${secrets." not in str(after[key]) and before[key] != after[key]:
            lines.append(f"    ~ {key}: {MASK} (changed)")
    old_hash = (live.get("metadata", {}).get("annotations") or {}).get(render.CONFIG_HASH)
    new_hash = (desired.get("metadata", {}).get("annotations") or {}).get(render.CONFIG_HASH)
    if old_hash != new_hash:
        lines.append(f"    config hash {old_hash} -> {new_hash} (env, files or a secret value)")
    return lines or ["    (no change to keys or values)"]


def _yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False)


def _indent(lines: Sequence[str] | str, prefix: str) -> list[str]:
    if isinstance(lines, str):
        lines = lines.splitlines()
    return [prefix + line for line in lines]
