"""What the backend reads for a slot whose objects come from a source: the source itself
(``render`` reads the manifests or renders the chart: local files, no cluster I/O), the
slot's objects of any kind (``observe``, through discovery), the claim on objects someone
else owns, status, and the diff a plan prints. Nothing here mutates anything.

What must never happen here: a Secret's data in a diff (keys are listed, values masked);
a chart that cannot be rendered pretending it can (it is a declaration, compared with the
live Helm release, and ``undeployable`` says why a deploy refuses).
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.batch_v1 import Job

from shipway.backends.kubernetes import chart, render
from shipway.backends.kubernetes.helm import read_deployed
from shipway.backends.kubernetes.helm_records import read_hand_over
from shipway.backends.kubernetes.ownership import HELM_NAMESPACE, HELM_RELEASE, owner_of
from shipway.backends.kubernetes.readiness import POD_OWNERS, job_outcome, last_job_of
from shipway.backends.kubernetes.reads import _yaml, comparable
from shipway.backends.kubernetes.source_state import SourceState
from shipway.backends.kubernetes.sources import (
    STOPPED_KINDS,
    SourceObject,
    containers_of,
    is_source_unit,
    phase_of,
    read_manifests,
    source_key,
    to_units,
)
from shipway.backends.protocol import ProcessStatus, Reporter
from shipway.errors import InputError, ObjectsTaken
from shipway.plan.model import ApplyObject, ObservedUnit, Plan, Remove, UnitState
from shipway.release import history
from shipway.release.artifact import Artifact, Unit, digest_of
from shipway.release.model import Release
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import MASK

STATUS_KINDS = (*sorted(POD_OWNERS), "CronJob")


class SourceReads(SourceState):
    """``render``, ``observe``, ``status`` and ``diff`` for source slots; ``claim``."""

    # -- the source --------------------------------------------------------------------

    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        """The slot's source: its manifests read, or its chart rendered by Helm's SDK, or
        (without it) the chart's declaration."""
        source = slot.source
        assert source is not None
        src = self._src()
        namespace = slot.namespace or render.instance_of(app.name, slot.name)
        release_name = source.release_name(app.name)
        if source.chart is not None and chart.helm_missing():
            body = chart.declaration(source, app.source_dir, release_name)
            return Artifact(
                (
                    Unit(
                        key=_declared_key(release_name),
                        kind=chart.DECLARED_KIND,
                        body=body,
                        phase=1,
                    ),
                )
            )
        objects: list[SourceObject]
        if source.chart is not None:
            objects, src.notes = chart.render_chart(source, app.source_dir, release_name, namespace)
        else:
            objects = read_manifests(app.source_dir, source.manifests)
        built = to_units(
            objects,
            app=app.name,
            slot=slot.name,
            namespace=namespace,
            described=f"{source.kind} source of slot {slot.name!r} ({source.describe()})",
            salt=release.secret_marks.salt,
            image=render.image_of(release) if release.image else None,
            image_containers=source.image_containers,
        )
        src.values.update(built.values)
        return built.artifact

    def undeployable(self, app: App, slot: Slot) -> str | None:
        source = slot.source
        if source is None or source.chart is None:
            return None
        missing = chart.helm_missing()
        if missing is None:
            return None
        return (
            f"slot {slot.name!r} takes its objects from chart {source.chart}, which can only "
            f"be compared here, not rendered: {missing} (hint: {chart.INSTALL_HINT})"
        )

    def claim(self, artifact: Artifact, take_over: bool, reporter: Reporter) -> None:
        src = self._src()
        for note in src.notes:
            reporter.line(note)
        units = [u for u in artifact if is_source_unit(u)]
        for unit in units:
            if unit.kind == "CustomResourceDefinition":
                src.discovery.declare_crd(unit.body)
        problems, served = [], {}
        source = self.state.slot.source
        for unit in units:
            api_version = str(unit.body["apiVersion"])
            with self.state._edge(f"discovering {unit.kind} ({api_version})"):
                kind = src.discovery.find(api_version, unit.kind)
            if kind is None:
                problems.append(
                    f"{unit.key}: the cluster serves no {unit.kind} in {api_version} "
                    "(hint: check the apiVersion, or add its CustomResourceDefinition)"
                )
            elif not kind.namespaced and not (source and source.allows_cluster_scoped(unit.kind)):
                problems.append(
                    f"{unit.key} is cluster-scoped, and slot {self.state.slot.name!r} allows no "
                    f'cluster-scoped {unit.kind} (hint: cluster_scoped = ["{unit.kind}"] in '
                    "its source)"
                )
            else:
                served[unit.key] = kind
        if problems:
            raise InputError("the source cannot be applied:\n  " + "\n  ".join(problems))
        owners = self._foreign_owners(units, served)
        if owners and not take_over:
            raise ObjectsTaken(owners)
        for key, owner in sorted(owners.items()):
            reporter.line(f"taking over {key} from {owner} (--take-over)")
        src.owners = owners
        src.hand_overs = []
        for (namespace, release), keys in sorted(src.helm_owned.items()):
            with self.state._edge(f"reading the records of Helm release {release}"):
                hand = read_hand_over(
                    self.state.client,
                    namespace,
                    release,
                    keys,
                    source.helm_records if source else "superseded",
                )
            if hand is not None:
                reporter.line(hand.describe())
                src.hand_overs.append(hand)

    def _foreign_owners(self, units: list[Unit], served: Mapping[str, Any]) -> dict[str, str]:
        """Objects of the set that exist and are someone else's: one list per namespaced
        kind (not a read per object), a read per cluster-scoped object."""
        owners: dict[str, str] = {}
        helm_owned = self._src().helm_owned
        helm_owned.clear()
        recorded = self._recorded_keys()
        by_kind: dict[Any, list[Unit]] = {}
        for unit in units:
            by_kind.setdefault(served[unit.key], []).append(unit)
        for kind, group in by_kind.items():
            names = {str(u.body["metadata"]["name"]): u.key for u in group}
            with self.state._edge(f"reading the live {kind.kind} objects"):
                if not self._src().discovery.serves(kind.api_version, kind.kind):
                    continue  # a kind only a CRD of the set will serve: none exists yet
                if kind.namespaced:
                    live = [
                        o.to_dict()
                        for o in self.state.client.list(
                            kind.resource, namespace=self.state.namespace
                        )
                    ]
                else:
                    live = [o for n in names if (o := self._get(kind.resource, n)) is not None]
            for obj in live:
                key = names.get(str((obj.get("metadata") or {}).get("name")))
                owner = (
                    owner_of(
                        obj,
                        self.state.app.name,
                        self.state.slot.name,
                        namespace=None if kind.namespaced else self.state.namespace,
                        recorded=key in recorded,
                    )
                    if key
                    else None
                )
                if key and owner:
                    owners[key] = owner
                notes = (obj.get("metadata") or {}).get("annotations") or {}
                if key and owner and HELM_RELEASE in notes:
                    where = str(notes.get(HELM_NAMESPACE) or self.state.namespace)
                    helm_owned.setdefault((where, str(notes[HELM_RELEASE])), set()).add(key)
        return owners

    def _get(self, resource: type[Any], name: str) -> dict[str, Any] | None:
        try:
            return dict(self.state.client.get(resource, name).to_dict())
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    # -- observing ------------------------------------------------------------------

    def records_read(self, records: list[Release]) -> None:
        """The slot's records as the backend just read them (which kinds its history
        holds)."""
        self._src().records = records

    def observe_rendered(self) -> bool:
        """Whether ``observe`` lists shipway's own objects too: a slot rendered by shipway,
        or a source slot whose history still holds objects of that render (to prune)."""
        return self.state.slot.source is None or self._history_has_rendered()

    def observe(self, target: Target) -> list[ObservedUnit]:
        """The source's objects of every kind the slot's history holds (by the source
        labels; only those its records list as applied, so pruning never deletes what it
        never applied), and a declared chart's live release."""
        source_units = [u for u in self._history_units() if is_source_unit(u)]
        units: list[ObservedUnit] = []
        source = self.state.slot.source
        if source is not None and source.chart and chart.helm_missing():
            units += self._observe_declared()
        kinds = {(str(u.body["apiVersion"]), u.kind) for u in source_units}
        declared = {(u.key, u.digest): u for u in source_units}
        src = self._src()
        for api_version, kind in sorted(kinds):
            with self.state._edge(f"listing the {kind} objects of {target}"):
                listed = self._listed(api_version, kind)
                for live in listed[1] if listed else []:
                    meta = live.get("metadata") or {}
                    key = source_key(api_version, kind, str(meta.get("name")))
                    digest = (meta.get("annotations") or {}).get(render.DIGEST)
                    src.found[key] = api_version
                    unit = declared.get((key, digest or ""))
                    units.append(
                        ObservedUnit(
                            key=key,
                            kind=kind,
                            digest=digest,
                            state=_state(live, unit),
                            phase=phase_of(kind),
                        )
                    )
        return units

    def _observe_declared(self) -> list[ObservedUnit]:
        """The live Helm release a declared chart is compared with, as a unit whose digest
        is that of the same declaration made from the release's deployed revision."""
        live = self._live_release()
        if live is None:
            return []
        body = chart.declared_body(live.name, live.chart.name, live.chart.version, live.config)
        key = _declared_key(live.name)
        return [ObservedUnit(key, chart.DECLARED_KIND, digest_of(body), "present", phase=1)]

    def _live_release(self) -> Any:
        source = self.state.slot.source
        assert source is not None and source.chart is not None
        name, _ = chart.chart_metadata(source, self.state.app.source_dir)
        with self.state._edge(f"reading Helm release {source.release_name(self.state.app.name)}"):
            try:
                return read_deployed(
                    self.state.client, source.release_name(self.state.app.name), chart=name
                )
            except InputError:  # no such release, or none of that chart deployed
                return None

    def live_digest(self, release: Release) -> str | None:
        """A source slot: the digest the containers its source names for ``--image`` run
        (what a promotion moves on)."""
        source = self.state.slot.source
        assert source is not None
        digests: set[str] = set()
        for unit in release.artifact:
            name = str(unit.body["metadata"]["name"])
            refs = [r for r in source.image_containers if r.workload == f"{unit.kind}/{name}"]
            if not refs or not is_source_unit(unit):
                continue
            served = self._served(unit.body)
            with self.state._edge(f"reading {unit.key}"):
                live = self.state.client.get(served.resource, name, namespace=self.state.namespace)
            for container in containers_of(live.to_dict()):
                image = str(container.get("image", ""))
                if "@" in image and any(r.container in (None, container.get("name")) for r in refs):
                    digests.add(image.split("@", 1)[1])
        others = sorted(d for d in digests if d != release.digest)
        return None if not digests else others[0] if others else release.digest

    # -- status ---------------------------------------------------------------------

    def status(self, target: Target, records: list[Release]) -> list[ProcessStatus]:
        """The source's workloads the deployed release holds (``records``: the slot's),
        each by its kind's counts, and a declared chart's drift from its live release."""
        source = self.state.slot.source
        assert source is not None
        out = self._declared_status() if source.chart and chart.helm_missing() else []
        deployed = history.deployed(records)
        kinds = {
            (str(u.body["apiVersion"]), u.kind)
            for u in (deployed.artifact if deployed else ())
            if u.kind in STATUS_KINDS
        }
        for api_version, kind in sorted(kinds):
            served = self._served({"apiVersion": api_version, "kind": kind})
            with self.state._edge(f"reading the {kind} objects of {target}"):
                found = [
                    o.to_dict()
                    for o in self.state.client.list(
                        served.resource,
                        namespace=self.state.namespace,
                        labels=self._source_labels(),
                    )
                ]
            rows = [_workload_status(kind, obj) for obj in found]
            if kind == "CronJob" and found:
                rows = self._with_last_jobs(target, found, rows)
            out += rows
        return sorted(out, key=lambda s: s.process)

    def _with_last_jobs(
        self, target: Target, cronjobs: list[dict[str, Any]], rows: list[ProcessStatus]
    ) -> list[ProcessStatus]:
        """Each CronJob's row with its last Job: its name, ``complete``, ``failed`` (and
        why) or ``running`` — a failed run is not hidden behind a CronJob that is "ready"."""
        with self.state._edge(f"reading the Jobs of the CronJobs of {target}"):
            jobs = [
                j.to_dict() for j in self.state.client.list(Job, namespace=self.state.namespace)
            ]
        out = []
        for cronjob, row in zip(cronjobs, rows, strict=True):
            last = last_job_of(cronjob, jobs)
            if last is None:
                out.append(replace(row, detail={**row.detail, "last_job": None}))
                continue
            state, why = job_outcome(last)
            detail = {
                **row.detail,
                "last_job": str(last["metadata"]["name"]),
                "last_job_state": state,
                **({"last_job_reason": why} if why else {}),
            }
            out.append(replace(row, detail=detail))
        return out

    def _declared_status(self) -> list[ProcessStatus]:
        source = self.state.slot.source
        assert source is not None
        declared = chart.declaration(
            source, self.state.app.source_dir, source.release_name(self.state.app.name)
        )
        live = self._live_release()
        want = f"{declared['chart']['name']}-{declared['chart']['version']}"
        detail: dict[str, Any] = {"declared": want, "live": None, "drift": "not installed"}
        if live is not None:
            detail["live"] = f"{live.chart} (revision {live.revision})"
            drift = []
            if str(live.chart) != want:
                drift.append("chart")
            if dict(live.config) != declared["values"]:
                drift.append("values")
            detail["drift"] = ", ".join(drift) or "none"
        name = f"helm release {source.release_name(self.state.app.name)}"
        return [ProcessStatus(process=name, desired=0, ready=0, detail=detail)]

    # -- the diff -------------------------------------------------------------------

    def holds(self, release: Release | None) -> bool:
        """Whether a release holds objects of a source (or a declared chart)."""
        return release is not None and any(
            is_source_unit(u) or u.kind == chart.DECLARED_KIND for u in release.artifact
        )

    def diff(self, plan: Plan, rendered: Callable[[Unit], list[str]]) -> list[str]:
        """Per object of a source plan: a declared chart against its live Helm release, a
        Secret by its keys only, anything else from a server-side dry run (shipway's own
        objects by ``rendered``: the backend's diff of one)."""
        release = plan.release
        assert release is not None
        lines: list[str] = []
        for step in plan.steps:
            if isinstance(step, ApplyObject):
                unit = release.artifact.get(step.unit)
                if unit.kind == chart.DECLARED_KIND:
                    lines += self._diff_declared(unit)
                elif is_source_unit(unit):
                    lines += self._diff_source(unit)
                else:
                    lines += rendered(unit)
            elif isinstance(step, Remove):
                lines.append(f"- {step.unit} (would be removed: {step.reason})")
        if (
            self.state.slot.source is not None
            and self.state.slot.source.chart
            and chart.helm_missing()
        ):
            lines.append(
                f"note: chart {self.state.slot.source.chart} is compared, not rendered: a deploy "
                f"refuses ({chart.INSTALL_HINT})"
            )
        return lines

    def _diff_declared(self, unit: Unit) -> list[str]:
        live = self._live_release()
        if live is None:
            name = unit.body["metadata"]["name"]
            return [f"+ {unit.key}: no deployed Helm release {name} of this chart in the namespace"]
        before = chart.declared_body(live.name, live.chart.name, live.chart.version, live.config)
        return [
            f"~ {unit.key} (drift from the live release, revision {live.revision})",
            *_unified(before, dict(unit.body), unit.key, "live", "declared"),
        ]

    def _diff_source(self, unit: Unit) -> list[str]:
        served = self._served(unit.body)
        name = str(unit.body["metadata"]["name"])
        with self.state._edge(f"diffing {unit.key}"):
            try:
                ns = self.state.namespace if served.namespaced else None
                live = self.state.client.get(served.resource, name, namespace=ns).to_dict()
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
                live = None
        desired = render.with_digest(unit)
        if unit.kind == "Secret":
            keys = sorted(desired.get("data") or {})
            if live is None:
                return [f"+ {unit.key} (new; keys: {', '.join(keys) or 'none'}, values {MASK})"]
            old = set(live.get("data") or {})
            added, gone = sorted(set(keys) - old), sorted(old - set(keys))
            parts = [f"+{k}" for k in added] + [f"-{k}" for k in gone]
            if parts:
                return [f"~ {unit.key} (keys {' '.join(parts)}; values {MASK})"]
            return [f"~ {unit.key} (same keys; a value or its metadata changed; values {MASK})"]
        if live is None:
            return [f"+ {unit.key} (new)", *("+   " + line for line in _yaml(desired).splitlines())]
        body = self._as_applied(copy.deepcopy(desired), served)
        with self.state._edge(f"diffing {unit.key}"):
            merged = self.state.client.patch(
                served.resource,
                name,
                body,
                namespace=ns,
                patch_type=_apply(),
                field_manager=render.MANAGER,
                force=True,
                dry_run=True,
            ).to_dict()
        out = _unified(comparable(live), comparable(merged), unit.key, "live", "planned")
        return [f"~ {unit.key}", *out] if out else [f"= {unit.key}"]


def _state(live: Mapping[str, Any], unit: Unit | None) -> UnitState:
    """Stopped: a Deployment or StatefulSet at zero replicas that its unit (the one its
    digest names) asks more of — ``stop``'s doing, or by hand; the next deploy applies it."""
    if unit is None or unit.kind not in STOPPED_KINDS:
        return "present"
    asked = (unit.body.get("spec") or {}).get("replicas", 1)
    running = (live.get("spec") or {}).get("replicas", 1)
    return "stopped" if running == 0 and asked != 0 else "present"


def _apply() -> Any:
    from lightkube.types import PatchType

    return PatchType.APPLY


def _unified(before: Any, after: Any, key: str, old: str, new: str) -> list[str]:
    out = list(
        difflib.unified_diff(
            _yaml(before).splitlines(),
            _yaml(after).splitlines(),
            fromfile=f"{key} ({old})",
            tofile=f"{key} ({new})",
            lineterm="",
            n=2,
        )
    )
    return ["    " + line for line in out[2:]]


def _declared_key(release: str) -> str:
    return render.unit_key(chart.DECLARED_KIND, release)


def _workload_status(kind: str, obj: Mapping[str, Any]) -> ProcessStatus:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    name = str((obj.get("metadata") or {}).get("name"))
    if kind == "DaemonSet":
        desired, ready = st.get("desiredNumberScheduled", 0), st.get("numberReady", 0)
    elif kind == "Job":
        desired, ready = spec.get("completions") or 1, st.get("succeeded", 0)
    elif kind == "CronJob":
        desired, ready = 0, len(st.get("active") or [])
    else:
        desired, ready = spec.get("replicas", 1), st.get("readyReplicas", 0)
    template = (spec.get("jobTemplate", {}).get("spec", {}) if kind == "CronJob" else spec).get(
        "template"
    ) or {}
    containers = (template.get("spec") or {}).get("containers") or [{}]
    detail = {"image": containers[0].get("image")}
    return ProcessStatus(
        process=f"{kind}/{name}", desired=int(desired), ready=int(ready), detail=detail
    )
