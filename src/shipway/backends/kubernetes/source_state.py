"""What the source part of the backend shares for one slot: discovery, the Secret values of
the objects this process read, the records last read (which kinds a slot's history holds),
the owners ``claim`` named (the only objects an apply may take over), and the watches of
the source's waits.

The source part (:class:`~.source_slot.SourceSlot`) is an object the backend holds, not a
class it derives from: :class:`SourceState` is given the backend's state (the connection,
the edge, the lock, the operation's watches) and reaches it as ``self.state``. Its own
state (:class:`Sourcing`) is created on first use, so a slot without a source pays nothing
for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shipway.backends.kubernetes.discovery import Discovery, ServedKind
from shipway.backends.kubernetes.helm_records import HandOver
from shipway.backends.kubernetes.sources import (
    SOURCE_NAMESPACE,
    is_source_unit,
    source_key,
    source_labels,
)
from shipway.backends.kubernetes.watch import Changes, LiveSet
from shipway.errors import BackendError
from shipway.release.artifact import Unit
from shipway.release.model import Release
from shipway.spec.secrets import Secret

if TYPE_CHECKING:
    from shipway.backends.kubernetes.state import KubernetesState


@dataclass
class Sourcing:
    discovery: Discovery
    #: the data of the source's Secrets, by placeholder name, as this process read them
    values: dict[str, Secret] = field(default_factory=dict)
    #: the same, as the slot's value stores hold them (read once, when needed)
    stored: dict[str, Secret] | None = None
    #: the records last read, and those written since: the kinds the slot's history holds
    records: list[Release] | None = None
    written: dict[int, Release] = field(default_factory=dict)
    #: unit key -> apiVersion of the source objects ``observe`` found (what ``remove`` deletes)
    found: dict[str, str] = field(default_factory=dict)
    #: unit key -> its owner, as ``claim`` named it in this operation (take-over allowed)
    owners: dict[str, str] = field(default_factory=dict)
    #: (namespace, release) -> the unit keys ``claim`` found a Helm release owns
    helm_owned: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    #: what this operation's take-over does to those releases' records, and the keys of
    #: their objects applied so far (a release's records change once all of its are)
    hand_overs: list[HandOver] = field(default_factory=list)
    handed: set[str] = field(default_factory=set)
    #: what a plan of this operation says about its source (a chart's hooks left out)
    notes: list[str] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)
    #: the source's objects of one kind (by apiVersion/kind), and its pods, watched
    watches: dict[str, LiveSet] = field(default_factory=dict)
    pods: LiveSet | None = None
    #: set-image: per workload, its own object and pod watches
    image_watches: dict[str, tuple[LiveSet, LiveSet]] = field(default_factory=dict)


class SourceState:
    """What every source part reads: the backend's state it was given, and its own
    (:class:`Sourcing`, created on first use)."""

    def __init__(self, state: KubernetesState) -> None:
        #: the backend's state: its connection, edge, lock and the operation's watches
        self.state = state
        self._sourcing: Sourcing | None = None

    def _src(self) -> Sourcing:
        if self._sourcing is None:
            self._sourcing = Sourcing(Discovery(self.state.client))
        return self._sourcing

    def _source_labels(self) -> dict[str, str]:
        return source_labels(self.state.app.name, self.state.slot.name)

    def _served(self, body: Any) -> ServedKind:
        """The kind that serves an object (apiVersion, kind), or BackendError."""
        api_version, kind = str(body.get("apiVersion")), str(body.get("kind"))
        with self.state._edge(f"discovering {kind} ({api_version})"):
            served = self._src().discovery.find(api_version, kind)
        if served is None:
            raise BackendError(
                f"the cluster serves no {kind} in {api_version} (hint: is its "
                "CustomResourceDefinition installed?)"
            )
        return served

    def _listed(self, api_version: str, kind: str) -> tuple[ServedKind, list[Any]] | None:
        """The slot's source objects of one kind as the cluster has them now (plain dicts,
        by the source labels, in the kind's scope, kept only when :meth:`_is_ours`), with
        the kind as served; None when the cluster no longer serves it (its CRD is gone:
        nothing of it is left). The caller holds the edge."""
        served = self._src().discovery.find(api_version, kind)
        if served is None:
            return None
        found = self.state.client.list(
            served.resource,
            namespace=self.state.namespace if served.namespaced else None,
            labels=self._source_labels(),
        )
        recorded = self._recorded_keys()
        objects = [obj.to_dict() for obj in found]
        return served, [o for o in objects if self._is_ours(o, api_version, served, recorded)]

    def _recorded_keys(self) -> set[str]:
        """The keys of the source objects the slot's records list as applied."""
        return {u.key for u in self._history_units() if is_source_unit(u)}

    def _is_ours(self, live: Any, api_version: str, served: ServedKind, recorded: set[str]) -> bool:
        """Whether a live object carrying the source labels is this slot's to prune, stop,
        destroy or judge (invariant 14): its records list it as applied, and, cluster-
        scoped, it carries this namespace's ``shipway.io/namespace`` (one applied before
        that label existed carries none: the records alone tell)."""
        meta = live.get("metadata") or {}
        key = source_key(api_version, served.kind, str(meta.get("name")))
        if key not in recorded:
            return False
        if served.namespaced:
            return True
        owned_by = (meta.get("labels") or {}).get(SOURCE_NAMESPACE, self.state.namespace)
        return bool(owned_by == self.state.namespace)

    def _as_applied(self, body: dict[str, Any], served: ServedKind) -> dict[str, Any]:
        """A source object's body as it is applied (changed in place, returned): in the
        slot's namespace, or, cluster-scoped, labelled with it."""
        meta = body.setdefault("metadata", {})
        if served.namespaced:
            meta["namespace"] = self.state.namespace
        else:
            meta.pop("namespace", None)
            meta["labels"] = {**(meta.get("labels") or {}), SOURCE_NAMESPACE: self.state.namespace}
        return body

    def _history_units(self) -> list[Unit]:
        """Every unit of every record read or written in this operation."""
        src = self._src()
        if src.records is None:
            with self.state._edge("reading the release records"):
                src.records = self.state._store().read()
        records = {r.revision: r for r in src.records} | src.written
        return [u for r in records.values() for u in r.artifact]

    def _history_has_rendered(self) -> bool:
        """Whether any record holds objects of shipway's own render (a slot that moved to
        a source prunes them)."""
        return any(not is_source_unit(u) for u in self._history_units())

    def _stop_source_watches(self) -> None:
        src = self._sourcing
        if src is None:
            return
        for live in src.watches.values():
            live.stop()
        src.watches.clear()
        for obj, pods in src.image_watches.values():
            obj.stop()
            pods.stop()
        src.image_watches.clear()
        if src.pods is not None:
            src.pods.stop()
            src.pods = None
        src.owners.clear()
        src.hand_overs.clear()
        src.handed.clear()
