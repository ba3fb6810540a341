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

from shipway.backends.kubernetes.discovery import ServedKind
from shipway.backends.kubernetes.source_state import SourceState
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


class SourceDestroy(SourceState):
    """What destroy does to the objects of the slot's source, and to their Secret data."""

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

    def kept_objects(self) -> list[tuple[str, str]]:
        """(key, kind) of the source objects destroy leaves."""
        return sorted(
            {(u.key, u.kind) for u in self._history_units() if is_source_unit(u) and u.kind in KEPT}
        )

    def objects(self, own: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Shipway's own objects (``own``) and the source's, in deletion order; what
        ``delete`` needs of the source's (their resource, their scope) is kept for it."""
        doomed: dict[tuple[str, str], ServedKind] = {}
        if any(map(is_source_unit, self._history_units())):
            for served, name in self._source_objects():
                if (served.kind, name) not in own:
                    doomed[(served.kind, name)] = served
        self._doomed = doomed
        source = list(doomed)
        claims = [o for o in source if o[0] == CLAIM]
        return [*(o for o in source if o[0] != CLAIM), *own, *claims]

    def doomed(self, kind: str, name: str) -> bool:
        """Whether the object is one of the source's that ``objects`` listed last."""
        return (kind, name) in self._doomed

    def delete(self, kind: str, name: str) -> None:
        served = self._doomed[(kind, name)]
        try:
            self.state.client.delete(
                served.resource,
                name,
                namespace=self.state.namespace if served.namespaced else None,
                cascade=CascadeType.BACKGROUND,
            )
        except ApiError as exc:
            if exc.status.code != 404:  # gone already: what destroy wanted
                raise

    def leftovers(self, out: list[Leftover]) -> list[Leftover]:
        """What is left, its cluster-scoped source objects said to be."""
        cluster = {k for k, s in self._doomed.items() if not s.namespaced}
        where = f" (namespace {self.state.namespace})"
        return [
            replace(item, name=item.name.removesuffix(where) + " (cluster-scoped)")
            if (item.kind, item.name.removesuffix(where)) in cluster
            else item
            for item in out
        ]

    def destroyed(
        self,
        clearance: Clearance,
        target: Target,
        revisions: list[int],
        kept: list[tuple[str, str]],
        reporter: Reporter,
    ) -> None:
        """Once the slot's objects and records are deleted: the Secret data of each
        revision's source (``revisions``: those the records held), and what stays
        (``kept``: :meth:`kept_objects`, read before) said."""
        with self.state._edge(f"deleting the source Secret data of {target}"):
            for revision in revisions:
                self.state._guard(clearance, target)
                name = store_name(self.state.app.name, revision)
                try:
                    self.state.client.delete(SecretObject, name, namespace=self.state.namespace)
                except ApiError as exc:
                    if exc.status.code != 404:  # a revision whose source held no Secret
                        raise
        for key, kind in kept:
            reporter.line(f"  {key} stays: {KEPT[kind]}")
