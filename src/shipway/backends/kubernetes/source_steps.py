"""The steps of a plan on a source's objects: server-side apply of any kind (field manager
``shipway``, through discovery), removal of what left the set, and the records — with, for
each release, the data of its source's Secrets kept apart from the record.

What must never happen here:
  * a Secret's data in a record's plain parts — a unit holds ``${secrets.S_…}``
    placeholders; the values go to a Secret of their own per revision
    (``shipway.sources.v1.<app>.v<N>``, type ``shipway.io/source-secrets.v1``), written
    with the pending record and deleted with it, so a rollback re-applies exactly what ran;
  * an object of another owner taken silently — only objects ``claim`` named in this
    operation (with ``--take-over``) lose their Helm ownership marks;
  * a pruning that destroys data or other apps' objects — CRDs, Namespaces, claims and
    volumes are never deleted for leaving the set (a warning says how to, by hand).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.resources.core_v1 import Secret as SecretObject
from lightkube.types import CascadeType, PatchType

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.helm_records import hand_over
from shipway.backends.kubernetes.ownership import helm_marks
from shipway.backends.kubernetes.source_waits import SourceWaits
from shipway.backends.kubernetes.sources import (
    NEVER_PRUNED,
    STOPPED_KINDS,
    decoded,
    read_manifests,
    to_units,
)
from shipway.backends.protocol import Reporter
from shipway.errors import CleanupFailed, InputError
from shipway.guard import Clearance
from shipway.plan.model import Remove
from shipway.release.artifact import Unit
from shipway.release.model import Release, ReleaseStatus
from shipway.spec.model import Target
from shipway.spec.secrets import Secret, names_in, reveal

STORE_TYPE = "shipway.io/source-secrets.v1"
STORE_OWNER = "shipway-sources"


def store_name(app: str, revision: int) -> str:
    return f"shipway.sources.v1.{app}.v{revision}"


def _template_of(body: Mapping[str, Any]) -> str:
    template = ((body.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return str((template.get("annotations") or {}).get(render.TEMPLATE, ""))


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _placeholders(unit: Unit) -> list[str]:
    if unit.kind != "Secret":
        return []
    return names_in(json.dumps(unit.body.get("data") or {}))


class SourceSteps(SourceWaits):
    """``apply``, ``remove`` and the records, for a source's objects."""

    def apply(
        self, clearance: Clearance, target: Target, unit: Unit, action: str, reporter: Reporter
    ) -> None:
        """One of the source's objects, by server-side apply, its Secret values as the
        source (or a revision's store) holds them."""
        self.state._guard(clearance, target)
        values = self._values_of(unit)
        self.state._secrets.update(values)
        self.state._secrets.update(decoded(values))
        body: dict[str, Any] = reveal(render.with_digest(unit), values)
        served = self._served(body)
        name = str(body["metadata"]["name"])
        namespace = self.state.namespace if served.namespaced else None
        self._as_applied(body, served)
        src = self._src()
        owner = src.owners.get(unit.key)
        if unit.waits and unit.kind != "CronJob":
            self._watch_kind(served)  # before the apply: what was there before is known
        with self.state._edge(f"applying {unit.key}"):
            if unit.kind == "Job" and action == "update":
                # A Job's template cannot change: a changed Job is a new run.
                reporter.line(f"replacing {unit.key} (a Job's pod template cannot change)")
                self._delete_object(served.resource, name, namespace)
            applied = self.state.client.patch(
                served.resource,
                name,
                body,
                namespace=namespace,
                patch_type=PatchType.APPLY,
                field_manager=render.MANAGER,
                force=True,
            )
        if unit.kind == "CustomResourceDefinition":
            src.discovery.declare_crd(body)
            src.discovery.forget(body)
        if unit.kind == "StatefulSet" and action == "update":
            self._replace_broken_pods(name, _template_of(body), reporter)
        live = applied.to_dict()
        self.state._generations[unit.key] = int((live.get("metadata") or {}).get("generation") or 0)
        self.state._uids[unit.key] = str((live.get("metadata") or {}).get("uid") or "")
        marks = helm_marks(live) if owner is not None else []
        if marks:
            with self.state._edge(f"removing Helm's ownership marks from {unit.key}"):
                self.state.client.patch(
                    served.resource,
                    name,
                    {"metadata": {"annotations": dict.fromkeys(marks)}},
                    namespace=namespace,
                    patch_type=PatchType.MERGE,
                    field_manager=render.MANAGER,
                )
            reporter.line(f"took over {unit.key} from {owner}: Helm no longer manages it")
        self._hand_over(unit.key, reporter)

    def _hand_over(self, key: str, reporter: Reporter) -> None:
        """Once every object a Helm release loses to this take-over is applied, its
        records are marked superseded or removed (the slot's ``helm_records``), so that
        ``helm uninstall`` no longer deletes them and ``helm list`` no longer claims them."""
        src = self._src()
        if not any(key in h.taken for h in src.hand_overs):
            return
        src.handed.add(key)
        for hand in [h for h in src.hand_overs if h.taken <= src.handed]:
            src.hand_overs.remove(hand)
            with self.state._edge(f"handing over the records of Helm release {hand.release}"):
                said = hand_over(
                    self.state.client,
                    hand,
                    f"app {self.state.app.name} slot {self.state.slot.name}",
                )
            reporter.line(said)

    def _replace_broken_pods(self, statefulset: str, template: str, reporter: Reporter) -> None:
        """A StatefulSet's forced rollback: its controller waits for a pod of an earlier
        revision to be Running and Ready before it replaces it, so a pod that never will be
        (a crash-looping revision being rolled back) would hold the rollout forever. Those,
        and only those (not Ready, of another template), are deleted: the controller makes
        them again from the template just applied."""
        pods = self._watch_source_pods().snapshot().values()
        for pod in pods:
            meta = pod.get("metadata") or {}
            owned = any(
                o.get("kind") == "StatefulSet" and o.get("name") == statefulset
                for o in meta.get("ownerReferences") or []
            )
            other = (meta.get("annotations") or {}).get(render.TEMPLATE) != template
            if not owned or not other or meta.get("deletionTimestamp") or _ready(pod):
                continue
            with self.state._edge(f"deleting pod {meta['name']} of StatefulSet/{statefulset}"):
                self._delete_object(Pod, str(meta["name"]), self.state.namespace)
            reporter.line(
                f"deleted pod {meta['name']}: not ready, of an earlier revision of "
                f"StatefulSet/{statefulset} (its controller would wait on it forever)"
            )

    def _delete_object(self, resource: type[Any], name: str, namespace: str | None) -> None:
        try:
            self.state.client.delete(
                resource, name, namespace=namespace, cascade=CascadeType.BACKGROUND
            )
        except ApiError as exc:
            if exc.status.code != 404:
                raise

    def observed(self, key: str) -> bool:
        """Whether ``observe`` found the object among the source's (``remove`` deletes
        it as one of them)."""
        return key in self._src().found

    def remove(self, clearance: Clearance, target: Target, step: Remove) -> None:
        api_version = self._src().found[step.unit]
        self.state._guard(clearance, target)
        kind, name = render.split_key(step.unit)
        if step.kind in NEVER_PRUNED:
            raise CleanupFailed(
                f"{step.unit} left the source but is not deleted by shipway (deleting it "
                "would delete the objects or data it holds)",
                f"delete {step.kind} {name} yourself once nothing needs it",
            )
        served = self._served({"apiVersion": api_version, "kind": step.kind})
        namespace = self.state.namespace if served.namespaced else None
        where = f" in namespace {namespace}" if namespace else ""
        with self.state._edge(f"removing {step.unit}", cleanup_fix=f"delete {kind} {name}{where}"):
            self._delete_object(served.resource, name, namespace)

    def stop(self, target: Target, reporter: Reporter) -> None:
        """The source's Deployments and StatefulSets, scaled to zero (``observe`` calls
        them stopped, so the next deploy or repair applies them again)."""
        kinds = {(str(u.body["apiVersion"]), u.kind) for u in self._history_units()}
        for api_version, kind in sorted(kinds):
            if kind not in STOPPED_KINDS:
                continue
            with self.state._edge(f"stopping the {kind} objects of {target}"):
                listed = self._listed(api_version, kind)
                if listed is None:  # no longer served: nothing of it runs
                    continue
                served, objects = listed
                for obj in objects:
                    name = obj["metadata"]["name"]
                    self.state.client.patch(
                        served.resource,
                        name,
                        {"spec": {"replicas": 0}},
                        namespace=self.state.namespace,
                        patch_type=PatchType.MERGE,
                    )
                    reporter.line(f"scaled {kind}/{name} to 0")

    # -- the records, and the values of the source's Secrets -----------------------------

    def write_values(self, records: Sequence[Release]) -> None:
        """Before the records are written: the Secret data of each pending release's
        source, in a Secret of its own."""
        for record in records:
            if record.status == ReleaseStatus.PENDING:
                self._write_values(record)

    def records_written(self, records: Sequence[Release]) -> None:
        """The records just written (which kinds the slot's history holds now)."""
        self._src().written.update({r.revision: r for r in records})

    def _write_values(self, release: Release) -> None:
        names = sorted({n for u in release.artifact for n in _placeholders(u)})
        if not names:
            return
        values = {n: self._value(n) for n in names}
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": store_name(release.app, release.revision),
                "namespace": self.state.namespace,
                "labels": {
                    "owner": STORE_OWNER,
                    "name": release.app,
                    "version": str(release.revision),
                },
            },
            "type": STORE_TYPE,
            "data": {n: base64.b64encode(v.reveal().encode()).decode() for n, v in values.items()},
        }
        with self.state._edge(f"writing the Secret data of r{release.revision}'s source"):
            self.state.client.patch(
                SecretObject,
                body["metadata"]["name"],
                body,
                namespace=self.state.namespace,
                patch_type=PatchType.APPLY,
                field_manager=render.MANAGER,
                force=True,
            )

    def delete_values(self, target: Target, revisions: Sequence[int]) -> None:
        """The Secret data of the deleted revisions' sources, with their records."""
        with self.state._edge(f"deleting old source Secret data of {target}"):
            for revision in revisions:
                self._delete_object(
                    SecretObject, store_name(self.state.app.name, revision), self.state.namespace
                )

    def _values_of(self, unit: Unit) -> dict[str, Secret]:
        return {n: self._value(n) for n in _placeholders(unit)}

    def _value(self, name: str) -> Secret:
        """A source Secret's value by its placeholder: as this process read the source,
        else as a revision's store holds it, else read from the source again (a saved plan
        made by another process); an InputError when none has it any more."""
        src = self._src()
        if name in src.values:
            return src.values[name]
        if src.stored is None:
            src.stored = self._read_stores()
        if name in src.stored:
            return src.stored[name]
        self._read_source_again()
        if name in src.values:
            return src.values[name]
        raise InputError(
            "a Secret of this release's source is no longer available (its manifests "
            "changed since the plan was made, and no recorded revision holds its data) "
            "(hint: make a new plan, or deploy again)"
        )

    def _read_stores(self) -> dict[str, Secret]:
        with self.state._edge(
            f"reading the source Secret data of {self.state.app.name}/{self.state.slot.name}"
        ):
            found = self.state.client.list(
                SecretObject,
                namespace=self.state.namespace,
                labels={"owner": STORE_OWNER, "name": self.state.app.name},
            )
            out: dict[str, Secret] = {}
            for store in found:
                if store.type != STORE_TYPE:
                    continue
                for name, data in (store.data or {}).items():
                    out[name] = Secret(base64.b64decode(data).decode())
        return out

    def _read_source_again(self) -> None:
        source = self.state.slot.source
        if source is None or source.chart is not None:
            return
        records = sorted(self._src().records or [], key=lambda r: -r.revision)
        salt = next((r.secret_marks.salt for r in records if r.secret_marks.salt), "")
        if not salt:  # a first deploy's saved plan: its salt was never recorded
            return
        try:
            objects = read_manifests(self.state.app.source_dir, source.manifests)
            built = to_units(
                objects,
                app=self.state.app.name,
                slot=self.state.slot.name,
                namespace=self.state.namespace,
                described=source.describe(),
                salt=salt,
            )
        except InputError:
            return
        self._src().values.update(built.values)
