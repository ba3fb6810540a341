"""``destroy`` in the cluster: every object labelled as the slot's — Ingresses, Services,
Deployments (their pods go with them), release-command Jobs, ConfigMaps, Secrets — and a
canary slot's HTTPRoutes and canary notes (labelled as the slot's under their own keys, so
observing never lists them: :mod:`.canary`), then the release records, and the Lease once
it is released. Claims stay unless asked. The objects of a source the slot's history holds,
and their Secret data, are the source part's (:mod:`.source_destroy`), called where they
join.

What must never happen: another app's or slot's object deleted (everything is found by the
slot's labels, the records by the app's), a claim deleted without ``volumes``, or the
namespace deleted: it may hold other apps, and deleting it would take every claim in it.
"""

from __future__ import annotations

from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.batch_v1 import Job
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import CascadeType

from shipway.backends.kubernetes import gateway as gw
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.accessories import KubernetesAccessories
from shipway.backends.kubernetes.lease import lease_name
from shipway.backends.kubernetes.records import record_name
from shipway.backends.kubernetes.state import RESOURCES
from shipway.backends.kubernetes.steps import KubernetesSteps
from shipway.backends.protocol import Leftover, Reporter
from shipway.guard import Clearance
from shipway.spec.model import Target

#: what destroy deletes, in order: what serves first, the records last
KINDS = ("Ingress", "Service", "Deployment", "Job", "ConfigMap", "Secret")
_TYPES: dict[str, type[Any]] = {**RESOURCES, "Job": Job, "HTTPRoute": gw.HTTPRoute}


class KubernetesDestroy(KubernetesSteps, KubernetesAccessories):
    """The protocol's Destroys."""

    def _found(self) -> list[tuple[str, str]]:
        """(kind, name) of the slot's objects, in deletion order, claims last."""
        out = self._routed_and_noted()
        for kind in (*KINDS, "PersistentVolumeClaim"):
            for obj in self.client.list(
                _TYPES[kind], namespace=self.namespace, labels=self._labels()
            ):
                out.append((kind, str(obj.metadata.name)))
        return out

    def _routed_and_noted(self) -> list[tuple[str, str]]:
        """(kind, name) of the slot's HTTPRoutes (where the cluster serves the kind) and
        its canary notes: they go first, the routes before the Services they send to."""
        instance = render.instance_of(self.app.name, self.slot.name)
        beside = [("ConfigMap", {gw.NOTES_LABEL: instance})]
        # an identity that may not list HTTPRoutes (a role without the Gateway API's
        # rights) never ran a canary here; a source's routes carry no route label
        if self._serves_routes(unless_forbidden=True):
            beside.insert(0, ("HTTPRoute", {gw.SLOT_LABEL: instance, gw.ROUTE_LABEL: "canary"}))
        return [
            (kind, str(obj.metadata.name))
            for kind, labels in beside
            for obj in self.client.list(_TYPES[kind], namespace=self.namespace, labels=labels)
        ]

    def leftovers(self, target: Target) -> list[Leftover]:
        self._serves(target)
        with self._edge(f"listing what shipway made for {target}"):
            found = self._objects()
            revisions = [r.revision for r in self._store().read()]
            lease = self._live_lease()
            accessories = self._accessory_leftovers()
        out = [
            Leftover(kind, f"{name} (namespace {self.namespace})", kind == "PersistentVolumeClaim")
            for kind, name in found
        ]
        if revisions:
            out.append(
                Leftover(
                    "release records",
                    f"{len(revisions)} Secrets {record_name(self.app.name, 0)[:-1]}*",
                )
            )
        if lease is not None:
            out.append(Leftover("Lease", lease_name(self.app.name, self.slot.name)))
        return self.source.leftovers(out) + accessories

    def _objects(self) -> list[tuple[str, str]]:
        """What :meth:`_found` lists, for this app (an app that declares no volume may be
        deployed by an identity that may not list claims), with the source objects the
        slot's history holds, all in deletion order (the source part orders them)."""
        own = self._found() if self.app.volumes else self._found_without_claims()
        return self.source.objects(own)

    def _found_without_claims(self) -> list[tuple[str, str]]:
        """As :meth:`_found`; an identity that may not list claims (a role written before
        volumes), with no volume declared, has none."""
        try:
            return self._found()
        except ApiError as exc:
            if exc.status.code != 403:
                raise
        return self._routed_and_noted() + [
            (kind, str(obj.metadata.name))
            for kind in KINDS
            for obj in self.client.list(
                _TYPES[kind], namespace=self.namespace, labels=self._labels()
            )
        ]

    def _live_lease(self) -> Any:
        try:
            return self.client.get(
                Lease, lease_name(self.app.name, self.slot.name), namespace=self.namespace
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    def destroy(
        self, clearance: Clearance, target: Target, volumes: bool, reporter: Reporter
    ) -> list[Leftover]:
        with self._edge(f"reading the release records of {target}"):
            revisions = sorted(r.revision for r in self._store().read())
        kept = self.source.kept_objects()  # read while the records are there
        self._guard(clearance, target)
        listed = self.leftovers(target)
        with self._edge(f"destroying {target}"):
            for kind, name in self._objects():
                if kind == "PersistentVolumeClaim" and not volumes:
                    continue
                self._guard(clearance, target)  # the Lease still ours, before each delete
                self._delete(kind, name)
                reporter.line(f"  deleted {kind} {name}")
            self._destroy_accessories(volumes, reporter)
            for revision in sorted(r.revision for r in self._store().read()):
                self._delete("Secret", record_name(self.app.name, revision))
            reporter.line(f"  deleted the release records of {target}")
        self._lease_doomed = True  # deleted as it is released (:mod:`.lock`)
        reporter.line(
            f"  namespace {self.namespace} stays: shipway never deletes a namespace "
            "(it may hold other apps)"
        )
        self.source.destroyed(clearance, target, revisions, kept, reporter)
        return [item for item in listed if volumes or not item.data]

    def _delete(self, kind: str, name: str) -> None:
        if self.source.doomed(kind, name):
            self.source.delete(kind, name)
            return
        try:
            self.client.delete(
                _TYPES[kind], name, namespace=self.namespace, cascade=CascadeType.BACKGROUND
            )
        except ApiError as exc:
            if exc.status.code != 404:
                raise
