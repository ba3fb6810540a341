"""``destroy`` of a slot whose objects come from a source: the source's objects of every
kind the slot's history holds (found by the source's labels, through discovery), deleted
with shipway's own objects — routes and Services first, then workloads, then what they
use, claims last and only with ``--volumes`` — then the records, and with them the Secret
data of each revision's source (``shipway.sources.v1.<app>.v<N>``).

What must never happen here: another app's or slot's object deleted (only objects carrying
this slot's source labels are listed); a claim deleted without ``volumes``; a
CustomResourceDefinition, Namespace or PersistentVolume deleted — deleting a CRD deletes
every custom resource of its kind in the cluster, a Namespace everything in it, a volume
its data; they stay, and destroy says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Secret as SecretObject
from lightkube.types import CascadeType

from shipway.backends.kubernetes.destroy import KubernetesDestroy
from shipway.backends.kubernetes.discovery import ServedKind
from shipway.backends.kubernetes.source_state import KubernetesSourceState
from shipway.backends.kubernetes.source_steps import store_name
from shipway.backends.kubernetes.sources import OTHER_RANK, RANKS, is_source_unit
from shipway.backends.protocol import Leftover, Reporter
from shipway.guard import Clearance
from shipway.spec.model import Target

CLAIM = "PersistentVolumeClaim"
#: what destroy leaves, with why (it may hold what is not the slot's)
KEPT = {
    "CustomResourceDefinition": "deleting it deletes every custom resource of its kind",
    "Namespace": "it may hold other apps",
    "PersistentVolume": "it holds data",
}


class KubernetesSourceDestroy(KubernetesDestroy, KubernetesSourceState):
    """The Destroys part, with the objects of the slot's source."""

    #: the source objects the last listing found, by (kind, name): their resource, scope
    _doomed: Mapping[tuple[str, str], ServedKind] = MappingProxyType({})

    def _source_objects(self) -> list[tuple[ServedKind, str]]:
        """The slot's source objects that exist, in deletion order (routes first,
        claims last), without those destroy keeps."""
        kinds = {
            (str(u.body["apiVersion"]), u.kind) for u in self._history_units() if is_source_unit(u)
        }
        found: list[tuple[ServedKind, str]] = []
        for api_version, kind in sorted(kinds):
            listed = None if kind in KEPT else self._listed(api_version, kind)
            if listed is not None:
                served, objects = listed
                found += [(served, str(o["metadata"]["name"])) for o in objects]
        found.sort(key=lambda f: (f[0].kind == CLAIM, -RANKS.get(f[0].kind, OTHER_RANK)))
        return found

    def _kept_objects(self) -> list[tuple[str, str]]:
        """(key, kind) of the source objects destroy leaves."""
        return sorted(
            {(u.key, u.kind) for u in self._history_units() if is_source_unit(u) and u.kind in KEPT}
        )

    def _objects(self) -> list[tuple[str, str]]:
        """Shipway's own objects and the source's, in deletion order; what ``_delete``
        needs of the source's (their resource, their scope) is kept for it."""
        own = super()._objects()
        doomed: dict[tuple[str, str], ServedKind] = {}
        if any(map(is_source_unit, self._history_units())):
            for served, name in self._source_objects():
                if (served.kind, name) not in own:
                    doomed[(served.kind, name)] = served
        self._doomed = doomed
        source = list(doomed)
        claims = [o for o in source if o[0] == CLAIM]
        return [*(o for o in source if o[0] != CLAIM), *own, *claims]

    def _delete(self, kind: str, name: str) -> None:
        served = self._doomed.get((kind, name))
        if served is None:
            super()._delete(kind, name)
            return
        try:
            self.client.delete(
                served.resource,
                name,
                namespace=self.namespace if served.namespaced else None,
                cascade=CascadeType.BACKGROUND,
            )
        except ApiError as exc:
            if exc.status.code != 404:  # gone already: what destroy wanted
                raise

    def leftovers(self, target: Target) -> list[Leftover]:
        out = super().leftovers(target)
        cluster = {k for k, s in self._doomed.items() if not s.namespaced}
        where = f" (namespace {self.namespace})"
        return [
            replace(item, name=item.name.removesuffix(where) + " (cluster-scoped)")
            if (item.kind, item.name.removesuffix(where)) in cluster
            else item
            for item in out
        ]

    def destroy(
        self, clearance: Clearance, target: Target, volumes: bool, reporter: Reporter
    ) -> list[Leftover]:
        with self._edge(f"reading the release records of {target}"):
            revisions = sorted(r.revision for r in self._store().read())
        kept = self._kept_objects()
        deleted = super().destroy(clearance, target, volumes, reporter)
        with self._edge(f"deleting the source Secret data of {target}"):
            for revision in revisions:
                self._guard(clearance, target)
                name = store_name(self.app.name, revision)
                try:
                    self.client.delete(SecretObject, name, namespace=self.namespace)
                except ApiError as exc:
                    if exc.status.code != 404:  # a revision whose source held no Secret
                        raise
        for key, kind in kept:
            reporter.line(f"  {key} stays: {KEPT[kind]}")
        return deleted
