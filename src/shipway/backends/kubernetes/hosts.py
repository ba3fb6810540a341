"""Who serves a host name in the cluster, and taking a host from another Ingress.

A host is served by the Ingresses with a rule for it, cluster-wide when this identity may
list them (else in the slot's namespace only, said so). The engine asks ``host_owner``
before a deploy or a switch and refuses a host another app or slot serves unless told to
take it; only the owners named then may have the host taken from them (``_take``), by any
step that routes it here (a rolling slot's Ingress apply, a blue-green ``point_host``).

What must never happen, and where it is prevented:
  * a host taken from an owner the engine did not name — ``_take`` refuses any other;
  * another owner's change lost — the other Ingress is changed only at the
    resourceVersion that was read: its rule is removed by a merge patch carrying that
    resourceVersion, and an Ingress whose only rule it is is deleted with ``uid`` and
    ``resourceVersion`` preconditions (DeleteOptions), never unconditionally. A conflict
    means it changed since it was read: it is read again and decided again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx2
from lightkube import ALL_NS
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.resources.networking_v1 import Ingress
from lightkube.types import PatchType

from shipway.backends.kubernetes import generations as gens
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.retrying import transient_read
from shipway.backends.kubernetes.state import KubernetesState
from shipway.backends.protocol import HostOwner, Reporter
from shipway.errors import BackendError
from shipway.release.artifact import Unit
from shipway.spec.model import App, Slot, Target

#: how many times a take reads the other Ingresses again after one changed under it
TAKE_ATTEMPTS = 4


class _Changed(Exception):
    """The other Ingress changed since it was read (a precondition or patch conflict)."""


def delete_unchanged(client: Any, ingress: Mapping[str, Any]) -> None:
    """Delete the Ingress only if it is still the object read (same ``uid``) and unchanged
    since (same ``resourceVersion``): a DELETE with DeleteOptions preconditions. lightkube's
    ``delete`` sends no body, so the request is made through its generic client; the API
    server answers 409 Conflict when a precondition fails."""
    meta = ingress["metadata"]
    generic = getattr(client, "unwrapped", client)._client  # under the retrying wrapper
    request = generic.prepare_request(
        "delete", Ingress, name=str(meta["name"]), namespace=str(meta["namespace"])
    )
    request.data = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
    }
    response = generic.send(generic.build_adapter_request(request))
    generic.handle_response("delete", response, request)


class KubernetesHosts(KubernetesState):
    """``hosts`` and ``host_owner`` (the protocol's host part), and taking a host."""

    def hosts(self, app: App, slot: Slot) -> list[tuple[str, str]]:
        return [(r.host, r.process) for r in app.routes]

    def _take_routed(self, unit: Unit, before: Any, reporter: Reporter) -> None:
        """After a rolling slot's Ingress was applied: take its hosts from the other
        Ingresses the engine named (``--take-host``); if that fails, the Ingress is put
        back as it was (``before``) and the step fails. Ours is applied first, so the host
        is never served by nobody in between."""
        try:
            for rule in (unit.body.get("spec") or {}).get("rules") or []:
                self._take(str(rule.get("host", "")), reporter)
        except BackendError:
            self._put_back(str(unit.body["metadata"]["name"]), before, reporter)
            raise
        if self._owner_scope:
            reporter.line(f"  note: {self._owner_scope}")

    def _ingresses_serving(self, host: str) -> list[dict[str, Any]]:
        """Every Ingress with a rule for ``host`` that is not being deleted: cluster-wide
        when this identity may list Ingresses there; else in the slot's namespace only
        (said once, by the step that routes it)."""
        try:
            found = [i.to_dict() for i in self.client.list(Ingress, namespace=ALL_NS)]
            self._owner_scope = None
        except ApiError as exc:
            if exc.status.code != 403:
                raise
            self._owner_scope = (
                f"who else serves a host was looked up in namespace {self.namespace} only "
                "(this identity may not list Ingresses cluster-wide)"
            )
            found = [i.to_dict() for i in self.client.list(Ingress, namespace=self.namespace)]
        return [
            i
            for i in found
            if gens.serves(i, host) and not (i.get("metadata") or {}).get("deletionTimestamp")
        ]

    def _ours(self, ingress: Mapping[str, Any]) -> bool:
        instance = render.instance_of(self.app.name, self.slot.name)
        return gens.is_ours(ingress, self.app.name, instance, self.namespace)

    def host_owner(self, target: Target, host: str) -> HostOwner | None:
        """Who serves ``host`` now, from the Ingresses with a rule for it: another app's or
        slot's (or one shipway did not make) before this slot's own. Read-only."""
        self._serves(target)
        with self._edge(f"looking up who serves {host}"):
            serving = self._ingresses_serving(host)
        others = [i for i in serving if not self._ours(i)]
        self._owners_seen[host.lower()] = [
            (str(i["metadata"]["namespace"]), str(i["metadata"]["name"])) for i in others
        ]
        ours = (self.app.name, self.slot.name, self.namespace)
        if others:
            return gens.owner_of(others[0], ours)
        if serving:
            return gens.owner_of(serving[0], ours)
        return None

    def _take(self, host: str, reporter: Reporter) -> None:
        """Take ``host`` out of the other Ingresses that serve it: only those host_owner
        named (the engine refused them unless told to take the host). Each is changed at
        the resourceVersion read; one that changed meanwhile is read and decided again."""
        allowed = set(self._owners_seen.get(host.lower(), []))
        for _ in range(TAKE_ATTEMPTS):
            with self._edge(f"looking up who else serves {host}"):
                others = [i for i in self._ingresses_serving(host) if not self._ours(i)]
            try:
                for ing in others:
                    self._take_from(ing, host, allowed, reporter)
            except _Changed as changed:
                reporter.line(f"  {changed}: reading it again")
                continue
            return
        raise BackendError(
            f"taking {host}: the Ingresses serving it kept changing while it was taken "
            "(hint: run again once their owner is done)"
        )

    def _take_from(
        self, ing: Mapping[str, Any], host: str, allowed: set[tuple[str, str]], reporter: Reporter
    ) -> None:
        meta = ing["metadata"]
        place = (str(meta["namespace"]), str(meta["name"]))
        owner = gens.owner_of(ing, (self.app.name, self.slot.name, self.namespace))
        if place not in allowed:
            raise BackendError(
                f"host {host} is also served by {owner}, which was not the case when "
                "this operation checked who serves it (hint: plan again, with --take-host "
                "to take it)"
            )
        rules, tls = gens.without_host(ing, host)
        with self._edge(f"taking {host} from {gens.where(ing)}"):
            try:
                # conditional writes: a 409 means "changed since read" and is never
                # retried as a conflict; only what the server refused before acting is
                raw = getattr(self.client, "unwrapped", self.client)

                def take() -> None:
                    if not rules:
                        delete_unchanged(raw, ing)
                        return
                    raw.patch(
                        Ingress,
                        place[1],
                        {
                            "metadata": {"resourceVersion": meta["resourceVersion"]},
                            "spec": {"rules": rules, "tls": tls or None},
                        },
                        namespace=place[0],
                        patch_type=PatchType.MERGE,
                    )

                policy = getattr(self.client, "policy", None)
                if policy is None:
                    take()
                else:
                    policy.call(take, transient_read)
            except ApiError as exc:
                if exc.status.code == 404:  # its owner deleted it meanwhile: nothing to take
                    reporter.line(f"  {gens.where(ing)} is gone already")
                    return
                if exc.status.code != 409:
                    raise
                raise _Changed(f"{gens.where(ing)} changed since it was read") from exc
        if not rules:
            reporter.line(f"  took {host} from {owner}: deleted its Ingress (only rule)")
        else:
            reporter.line(f"  took {host} from {owner}: removed its rule")

    def _put_back(self, name: str, before: Any, reporter: Reporter) -> None:
        """Undo a point whose take failed: the Ingress as it was (or none). Applied as it
        was, so what the point added (its labels, its backend) is taken back out."""
        try:
            if before is None:
                self.client.delete(Ingress, name, namespace=self.namespace)
                return
            was = before.to_dict()
            meta = was.get("metadata") or {}
            body = {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": meta.get("labels") or {},
                    "annotations": meta.get("annotations") or {},
                },
                "spec": was.get("spec") or {},
            }
            self.client.apply(from_dict(body), force=True)
        except (ApiError, httpx2.HTTPError) as exc:
            reporter.line(f"warning: putting Ingress {name} back as it was failed: {exc}")
