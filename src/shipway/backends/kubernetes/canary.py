"""A canary on Kubernetes: the Gateway API splits, Prometheus counts.

Setting a share (``shift_traffic``) starts the canary's Deployment and Service beside the
stable ones (``<app>-<process>-canary``: a copy of the release's, its pods told apart by
their component label, gated by the same rollout wait as any Deployment), then applies each
routed host's ``HTTPRoute`` — attached to the Gateway the spec names — with the share as
the canary Service's weight, and waits until the Gateway's implementation says the route is
``Accepted`` with its references resolved (the weight counts only then). Share 0 (an abort)
and the end of a promoted canary put every request back on the stable Service (after the
switch, the stable Deployment runs the new release), then delete the canary's objects.

The canary's objects carry the slot's labels: observing the slot sees them, so the undo of
a failed deploy and the recovery of a killed one prune them — and :meth:`unroute`, called
before any of them is removed, first takes the routes off them. The counts are Prometheus'
(:mod:`.gateway`): the implementation's requests, 5xx answers and duration histogram per
Service. The engine's and a person's notes are a ConfigMap beside them. Nothing here
decides; the engine does (:mod:`shipway.engine.canary`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import httpx2
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.operators import exists
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Service
from lightkube.types import CascadeType, PatchType

from shipway.backends.canary import CanaryCounts, canary_id
from shipway.backends.kubernetes import gateway as gw
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.endpoints import wait_listed
from shipway.backends.kubernetes.names import dns_name
from shipway.backends.kubernetes.replica_canary import KubernetesReplicaCanaries, status_code
from shipway.backends.kubernetes.rollout import Watched, readiness_window
from shipway.backends.protocol import Reporter
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.plan.canary import Tally
from shipway.release.artifact import Unit
from shipway.release.model import Release
from shipway.spec.canary import Canary
from shipway.spec.model import Target

NOTES = ("state", "decision")
#: how long the implementation gets to take a route (the pods' gate: GATE_WITHIN)
ROUTE_WITHIN = 60.0


class KubernetesCanaries(KubernetesReplicaCanaries):
    """The protocol's Canaries part on Kubernetes (and the preflight that refuses a canary
    where the cluster cannot run one); a replica-ratio canary's own steps are in
    :mod:`.replica_canary`."""

    def _gateway_spec(self) -> Canary:
        rules = self.slot.canary
        if rules is None or not rules.gateway or not rules.prometheus:
            raise InputError(
                f"slot {self.slot.name!r} runs no canary on kubernetes (hint: set strategy = "
                '"canary" and [slots.NAME.canary] gateway and prometheus)'
            )
        return rules

    # -- before a plan --------------------------------------------------------------

    def canary_refusal(self, target: Target) -> str | None:
        """Why a canary cannot run in this slot's cluster (None: it can): no Gateway API
        (the HTTPRoute kind is not served), no such Gateway, no implementation that
        accepted it, or no Prometheus answering — or nothing to split: a slot whose objects
        come from a source, or an app without routes. Read-only."""
        self._serves(target)
        if self.slot.source is not None:
            return (
                "its objects come from a source (manifests or a chart): shipway splits only "
                "what it renders"
            )
        if not self.app.in_slot(self.slot.name).routes:
            return "the app has no route: no request to split (add a [[routes]] entry)"
        if self._by_replicas():  # split by pod count: no Gateway, no Prometheus needed
            return None
        rules = self._gateway_spec()
        assert rules.gateway is not None and rules.prometheus is not None
        ns, name = gw.split_gateway(rules.gateway)
        if not self._serves_routes():
            return (
                "the cluster serves no Gateway API (no HTTPRoute kind): install the Gateway "
                'API\'s CRDs and an implementation, or use strategy = "rolling"'
            )
        found = self._object_or_none(gw.Gateway, name, ns, f"reading the Gateway {rules.gateway}")
        if found is None:
            key = f"[slots.{self.slot.name}.canary] gateway"
            return f"there is no Gateway {rules.gateway} (key {key})"
        ok, why = gw.gateway_accepted(found.to_dict())
        if not ok:
            return (
                f"no Gateway API implementation accepted the Gateway {rules.gateway}: {why} — "
                "nothing would split the requests"
            )
        down = gw.reachable(rules.prometheus)
        if down is not None:
            return f"no counts: {down} (key prometheus of [slots.{self.slot.name}.canary])"
        return None

    def canary_keeps_clients(self, target: Target) -> bool:
        """Whether the Gateway's implementation sets the cookie of the side that served a
        first answer (its GatewayClass declares that it runs a backendRef's filters): only
        then does the route's split carry them. Read-only; False when it cannot be read."""
        self._serves(target)
        rules = self._gateway_spec()
        assert rules.gateway is not None
        ns, name = gw.split_gateway(rules.gateway)
        try:
            doing = f"reading the Gateway {rules.gateway}"
            found = self._object_or_none(gw.Gateway, name, ns, doing)
            spec = (found.to_dict() if found is not None else {}).get("spec") or {}
            cls_name = str(spec.get("gatewayClassName") or "")
            doing = f"reading the GatewayClass {cls_name}"
            cls = self._object_or_none(gw.GatewayClass, cls_name, None, doing) if cls_name else None
        except BackendError:  # e.g. an identity that may not read GatewayClasses
            return False
        return cls is not None and gw.keeps_clients(cls.to_dict())

    # -- the share ------------------------------------------------------------------

    def shift_traffic(
        self, clearance: Clearance, target: Target, release: Release, percent: int, r: Reporter
    ) -> None:
        self._guard(clearance, target)
        if self._by_replicas():  # no router: the share is the canary's pods (or none)
            if 0 < percent < 100:
                return self._replica_share(target, release, percent, r)
            if percent == 0:
                r.line("  the canary's pods removed: the stable's pods alone serve")
            return self._remove_canaries(r)
        rules = self._gateway_spec()
        ident = canary_id(release)
        hosts = self._routed(release)
        if 0 < percent < 100:
            for process in sorted({p for _, p, _ in hosts}):
                self._start_canary(target, release, process, ident, r)
        moved = []
        sticky = 0 < percent < 100 and self.canary_keeps_clients(target)
        for host, process, port in hosts:
            stable = render.workload_name(self.app.name, process)
            split = (gw.canary_name(stable), ident, percent) if 0 < percent < 100 else None
            if split is None and not self._route_exists(host):
                continue  # never split: nothing to put back
            body = gw.route_body(
                self.app.name, self.slot.name, self.namespace, host, str(rules.gateway),
                stable, port, split, set_cookies=sticky,
            )  # fmt: skip
            self._apply_route(body)
            moved.append(host)
        for host in moved:
            self._wait_route(gw.route_name(self.app.name, host), str(rules.gateway))
        if 0 < percent < 100:
            r.line(f"  {percent}% of {', '.join(sorted(moved))} to r{release.revision} "
                   f"(HTTPRoute weights, accepted by the Gateway {rules.gateway}; "
                   f"{'a first answer sets' if sticky else 'no answer sets'} the cookie "
                   f"{gw.COOKIE})")  # fmt: skip
            return
        if percent == 0:
            r.line("  every request to the stable release (the canary's share is 0)")
        self._remove_canaries(r)

    def _routed(self, release: Release) -> list[tuple[str, str, int]]:
        """(host, process, port) of each route of the release."""
        return [_host_of(unit) for unit in release.artifact if unit.kind == "Ingress"]

    def route_beside(self, unit: Unit) -> None:
        """With a host's Ingress applied on a canary slot: the host's HTTPRoute, every
        request to the stable Service, when there is none yet — so the Gateway serves the
        slot from its first deploy (a route that exists is left as it is: a canary may be
        splitting it)."""
        rules = self.slot.canary
        if rules is None or not rules.gateway or unit.kind != "Ingress":
            return
        host, process, port = _host_of(unit)
        if self._route_exists(host):
            return
        stable = render.workload_name(self.app.name, process)
        body = gw.route_body(
            self.app.name, self.slot.name, self.namespace, host, rules.gateway, stable, port, None
        )
        self._apply_route(body)

    def _start_canary(
        self, target: Target, release: Release, process: str, ident: str, r: Reporter
    ) -> None:
        """The canary's Deployment and Service of ``process``, applied and gated."""
        from shipway.backends.kubernetes.steps import manifest  # steps derives from this part

        name = render.workload_name(self.app.name, process)
        doing = f"reading the canary of {process}"
        live = self._object_or_none(Deployment, gw.canary_name(name), self.namespace, doing)
        if live is not None and (live.metadata.labels or {}).get(gw.CANARY_LABEL) == ident:
            return  # started and gated at an earlier share
        for kind in ("Service", "Deployment"):
            unit = release.artifact.get(render.unit_key(kind, name))
            body = gw.canary_workload(manifest(unit, self._secrets), ident)
            with self._edge(f"starting the canary's {kind} {body['metadata']['name']}"):
                applied = self.client.apply(from_dict(body), force=True)
            if kind != "Deployment":
                continue
            watched = Watched(
                process=f"{process}{gw.SUFFIX}",  # its pods' component (web-canary)
                deployment=body["metadata"]["name"],
                template=body["spec"]["template"]["metadata"]["annotations"][render.TEMPLATE],
                replicas=render.declared_replicas(body),
                generation=int(applied.metadata.generation or 0),
                readiness_window=readiness_window(body, self.tuning),
            )
            self._gate(target, watched, r, f"{process} (canary)")
            # no route sends to the canary's Service before it lists the pods counted ready
            # (the endpoints controller lags the Deployment; the Gateway answers 503 then)
            canary = body["metadata"]["name"]
            with self._edge(f"waiting for Service {canary} to list its pods"):
                wait_listed(self.client, self.namespace, canary, canary, r)
            r.line(f"  the canary of {process} is ready ({canary})")

    def _route_exists(self, host: str) -> bool:
        name = gw.route_name(self.app.name, host)
        doing = f"reading HTTPRoute/{name}"
        return self._object_or_none(gw.HTTPRoute, name, self.namespace, doing) is not None

    def _apply_route(self, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        with self._edge(f"applying HTTPRoute/{name}"):
            self.client.patch(gw.HTTPRoute, name, body, namespace=self.namespace,
                              patch_type=PatchType.APPLY, force=True)  # fmt: skip

    def _wait_route(self, name: str, gateway: str) -> None:
        """Until the Gateway's implementation took the route as applied."""
        deadline = time.monotonic() + ROUTE_WITHIN
        why = ""
        while time.monotonic() < deadline:
            with self._edge(f"reading HTTPRoute/{name}"):
                route = self.client.get(gw.HTTPRoute, name, namespace=self.namespace)
            ok, why = gw.route_state(route.to_dict(), gateway)
            if ok:
                return
            time.sleep(0.2)
        raise BackendError(
            f"the Gateway {gateway} did not accept HTTPRoute/{name} within "
            f"{ROUTE_WITHIN:.0f}s: {why}"
        )

    def _remove_canaries(self, r: Reporter) -> None:
        """The canary's Deployments and Services (no route sends to them any more)."""
        labels: dict[str, Any] = {**self._labels(), gw.CANARY_LABEL: exists()}
        for resource in (Service, Deployment):
            with self._edge(f"removing the canary's {resource.__name__}s"):
                for obj in self.client.list(resource, namespace=self.namespace, labels=labels):
                    self.client.delete(resource, obj.metadata.name, namespace=self.namespace,
                                       cascade=CascadeType.BACKGROUND)  # fmt: skip
                    r.line(f"  removed the canary's {resource.__name__} {obj.metadata.name}")

    def unroute(self, name: str) -> None:
        """Before a canary object ``name`` is removed (an undo, a recovery): every route of
        the slot that still splits to it sends every request to the stable Service."""
        rules = self.slot.canary
        if rules is None or not rules.gateway or not gw.is_canary_object(name):
            return
        for route in self._canary_routes():
            body = route.to_dict()
            split = body["spec"]["rules"][-1]["backendRefs"]
            stable, port = split[0]["name"], int(split[0]["port"])
            fresh = gw.route_body(
                self.app.name, self.slot.name, self.namespace, body["spec"]["hostnames"][0],
                rules.gateway, stable, port, None,
            )  # fmt: skip
            self._apply_route(fresh)
            self._wait_route(fresh["metadata"]["name"], rules.gateway)

    def _canary_routes(self) -> list[Any]:
        if not self._serves_routes():  # no Gateway API: no route
            return []
        labels = {gw.SLOT_LABEL: render.instance_of(self.app.name, self.slot.name)}
        with self._edge("reading the slot's HTTPRoutes"):
            found = list(self.client.list(gw.HTTPRoute, namespace=self.namespace, labels=labels))
        return [
            route for route in found
            if gw.CANARY in (route.to_dict()["metadata"].get("annotations") or {})
        ]  # fmt: skip

    def _serves_routes(self, *, unless_forbidden: bool = False) -> bool:
        """Whether the cluster serves the HTTPRoute kind (the Gateway API's CRDs); with
        ``unless_forbidden``, False too when the identity may not list them."""
        with self._edge("reading the Gateway API"):
            try:
                next(iter(self.client.list(gw.HTTPRoute, namespace=self.namespace)), None)
            except (ApiError, httpx2.HTTPStatusError) as exc:
                if status_code(exc) == 404 or (unless_forbidden and status_code(exc) == 403):
                    return False
                raise
        return True

    # -- the counts -----------------------------------------------------------------

    def canary_counts(self, target: Target) -> CanaryCounts | None:
        self._serves(target)
        if self._by_replicas():
            return self._replica_counts()
        rules = self.slot.canary
        if rules is None or not rules.prometheus:
            return None
        routes = self._canary_routes()
        if not routes:
            return None
        services: dict[str, set[str]] = {"stable": set(), "canary": set()}
        for route in routes:  # every routed process (two hosts of one process: one each)
            split = route.to_dict()["spec"]["rules"][-1]["backendRefs"]
            for side, ref in zip(("stable", "canary"), split, strict=False):
                name = gw.traefik_service(self.namespace, ref["name"], int(ref["port"]))
                services[side].add(name)
        annotations = routes[0].to_dict()["metadata"]["annotations"]
        sides = gw.tallies(rules.prometheus, services)
        return CanaryCounts(
            canary=str(annotations[gw.CANARY]),
            percent=int(annotations.get(gw.PERCENT, 0)),
            stable=sides.get("stable", Tally()),
            on_canary=sides.get("canary", Tally()),
        )

    # -- notes ----------------------------------------------------------------------

    def _notes_name(self) -> str:
        return dns_name(self.app.name, self.slot.name, "canary-notes", limit=253)

    def canary_note(
        self, clearance: Clearance, target: Target, name: str, doc: Mapping[str, Any] | None
    ) -> None:
        """Write (or, ``doc`` None, remove) one note: its key alone, by a merge patch. The
        deploy writes its ``state`` while a person's ``canary promote`` writes the
        ``decision``; a read of the whole map and a write of it back lost the one written
        in between (the decision gone, the command saw it as taken, and the deploy held)."""
        self._guard(clearance, target)
        _known(name)
        cm = self._notes_name()
        value = None if doc is None else json.dumps(dict(doc), sort_keys=True)
        with self._edge(f"writing the canary's {name} note"):
            if self._patch_note(cm, name, value) or value is None:
                return
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": cm,
                    "namespace": self.namespace,
                    # not the slot's labels: observing and pruning never see it
                    "labels": {render.MANAGED_BY: render.MANAGER, gw.NOTES_LABEL:
                               render.instance_of(self.app.name, self.slot.name)},
                },
                "data": {name: value},
            }  # fmt: skip
            try:
                self.client.create(from_dict(body))
            except ApiError as exc:
                if exc.status.code != 409 or not self._patch_note(cm, name, value):
                    raise  # 409: the other writer made the map meanwhile; then a patch

    def _patch_note(self, cm: str, name: str, value: str | None) -> bool:
        """Set (None: remove) one key of the notes' map; False when there is no map."""
        try:
            self.client.patch(
                ConfigMap, cm, {"data": {name: value}},
                namespace=self.namespace, patch_type=PatchType.MERGE,
            )  # fmt: skip
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            return False
        return True

    def read_canary_note(self, target: Target, name: str) -> dict[str, Any] | None:
        self._serves(target)
        _known(name)
        with self._edge(f"reading the canary's {name} note"):
            try:
                live = self.client.get(ConfigMap, self._notes_name(), namespace=self.namespace)
            except ApiError as exc:
                if exc.status.code in (403, 404):
                    return None
                raise
        raw = (live.data or {}).get(name)
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None


def _host_of(unit: Unit) -> tuple[str, str, int]:
    """(host, process, port) of a host's Ingress."""
    rule = unit.body["spec"]["rules"][0]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    return str(rule["host"]), str(unit.process or ""), int(backend["port"]["number"])


def _known(name: str) -> None:
    if name not in NOTES:
        raise InputError(f"no canary note {name!r} (known: {', '.join(NOTES)})")
