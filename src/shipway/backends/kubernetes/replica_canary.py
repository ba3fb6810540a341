"""A replica-ratio canary on Kubernetes (``split = "replicas"``): no router, no counts.

The canary is a copy of the release's Deployment named ``<app>-<process>-canary`` (as a
counted canary's is), but its pods keep the process's component label, so the stable
Service selects them beside the stable's: kube-proxy sends each connection to one of the
Service's ready pods, and the canary's share is its pods among all of them
(:func:`shipway.plan.replica_canary.replica_share`: rounded to the nearest pod, at least
one, against the live stable Deployment's replicas). Its selector adds the canary's id
(``shipway.io/canary``), so the two Deployments never own each other's pods, and the stable
Deployment, whose selector is a subset, never adopts them (each pod has its ReplicaSet as
owner). Each share applies the Deployment with its pods and gates it with the rollout wait.

While a share is held, :meth:`canary_health` reads the canary's Deployment and pods and
judges them by the rollout watch's rules even once they are ready (:meth:`Judge.health`):
crash loops, a failing readiness probe, a pod that cannot start. Share 0 (an abort) and the
end of a promoted canary delete its Deployment (:mod:`.canary`'s removal); the stable Service
then selects the stable's pods alone. The Deployment carries the slot's labels, so the undo
of a failed deploy and the recovery of a killed one prune it, as a counted canary's.
"""

from __future__ import annotations

import time
from typing import Any

import httpx2
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.operators import exists
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

from shipway.backends.canary import CanaryCounts, CanaryNotReady, canary_id
from shipway.backends.kubernetes import gateway as gw
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.health import KubernetesHealth
from shipway.backends.kubernetes.rollout import Judge, Watched, readiness_window
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.plan.canary import Tally
from shipway.plan.replica_canary import replica_share
from shipway.release.model import Release
from shipway.spec.model import Target

#: how long the canary's pods get to be ready at each share
GATE_WITHIN = 300.0


def replica_workload(body: dict[str, Any], ident: str, pods: int, percent: int) -> dict[str, Any]:
    """The canary's Deployment beside the stable one of ``body`` (the release's): named as a
    counted canary's, ``pods`` replicas, its pods selected by the stable Service (their
    component is the process's) and by its own selector alone (the canary's id added)."""
    out = gw.canary_workload(body, ident)
    component = str(body["metadata"]["labels"][render.COMPONENT])
    out["metadata"]["annotations"] = {
        **(out["metadata"].get("annotations") or {}),
        gw.PERCENT: str(percent),
    }
    out["spec"]["replicas"] = pods
    selector = out["spec"]["selector"]["matchLabels"]
    selector.update({render.COMPONENT: component, gw.CANARY_LABEL: ident})
    out["spec"]["template"]["metadata"]["labels"][render.COMPONENT] = component
    return out


def status_code(exc: ApiError | httpx2.HTTPStatusError) -> int:
    """The HTTP status of an API error (a kind not served answers a bare 404)."""
    if isinstance(exc, ApiError):
        return int(exc.status.code or 0)
    return exc.response.status_code


class KubernetesReplicaCanaries(KubernetesHealth):
    """The replica-ratio half of the Canaries part (:mod:`.canary` branches here)."""

    #: per routed process, what a held share watches: (the canary's id, its Deployment as
    #: applied, the judge of its pods), set at each share
    _held: dict[str, tuple[str, Watched, Judge]] | None = None

    def _by_replicas(self) -> bool:
        rules = self.slot.canary
        return rules is not None and rules.split == "replicas"

    def _replica_share(self, target: Target, release: Release, percent: int, r: Reporter) -> None:
        """Each routed process's canary scaled to ``percent`` of its pods, and gated."""
        ident = canary_id(release)
        routed = sorted({u.process for u in release.artifact if u.kind == "Ingress" and u.process})
        held = {}
        for process in routed:
            watched = self._scale_canary(target, release, process, ident, percent, r)
            held[process] = (ident, watched, Judge(watched, self.tuning))
        self._held = held

    def _scale_canary(
        self, target: Target, release: Release, process: str, ident: str, percent: int,
        r: Reporter,
    ) -> Watched:  # fmt: skip
        from shipway.backends.kubernetes.steps import manifest  # steps derives from this part

        name = render.workload_name(self.app.name, process)
        unit = release.artifact.get(render.unit_key("Deployment", name))
        live = self._object_or_none(Deployment, name, self.namespace, f"reading Deployment/{name}")
        stable = (
            int(live.spec.replicas or 0) if live is not None and live.spec is not None
            else render.declared_replicas(unit.body)
        )  # fmt: skip
        pods, share = replica_share(percent, stable)
        body = replica_workload(manifest(unit, self._secrets), ident, pods, percent)
        with self._edge(f"scaling the canary of {process} to {pods} pods"):
            applied = self.client.apply(from_dict(body), force=True)
        watched = Watched(
            process=process,
            deployment=body["metadata"]["name"],
            template=body["spec"]["template"]["metadata"]["annotations"][render.TEMPLATE],
            replicas=pods,
            generation=int(applied.metadata.generation or 0),
            readiness_window=readiness_window(body, self.tuning),
        )
        self._gate(target, watched, r, f"{process} (canary)")
        r.line(
            f"  the canary of {process}: {pods} pod{'s' if pods != 1 else ''} beside the "
            f"stable's {stable}, ready — about {share:.0f}% of its requests by pod count "
            f"({percent}% asked)"
        )
        return watched

    def _gate(self, target: Target, watched: Watched, r: Reporter, label: str = "") -> None:
        """Until the canary's Deployment is ready (the rollout wait; its progress and its
        failure said as ``label``), else :class:`CanaryNotReady` with the wait's failure."""
        temporary = self._session is None
        with self._edge(f"watching {watched.deployment}"):
            session = self._start_session()
        try:
            deadline = time.monotonic() + GATE_WITHIN
            label = label or watched.process
            failure = self._wait(target, session, label, [watched], deadline, r)
        finally:
            if temporary:
                self._end_session()
        if failure is not None:  # the watch's own words: reason, exit code, log tail
            raise CanaryNotReady(failure)

    def _object_or_none(
        self, resource: Any, name: str, namespace: str | None, doing: str
    ) -> Any:
        """The object, or None when it is not there."""
        with self._edge(doing):
            try:
                return self.client.get(resource, name, namespace=namespace)
            except (ApiError, httpx2.HTTPStatusError) as exc:
                if status_code(exc) == 404:
                    return None
                raise

    def canary_health(self, target: Target) -> Failure | None:
        self._serves(target)
        for process, (ident, watched, judge) in sorted((self._held or {}).items()):
            live = self._object_or_none(
                Deployment, watched.deployment, self.namespace,
                f"reading Deployment/{watched.deployment}",
            )  # fmt: skip
            if live is None:
                return Failure(
                    Reason.CANARY_ABORTED,
                    f"the canary's Deployment {watched.deployment} is gone",
                    process=process,
                )
            with self._edge(f"reading the pods of {watched.deployment}"):
                pods = self.client.list(Pod, namespace=self.namespace,
                                        labels={gw.CANARY_LABEL: ident})  # fmt: skip
                found = [p.to_dict() for p in pods]
            signal = judge.health(live.to_dict(), found, time.monotonic())
            if signal is not None:
                return self._failure(f"{process} (canary)", signal, [watched])
        return None

    def _replica_counts(self) -> CanaryCounts | None:
        """The canary running now (its id and asked share, from its Deployment) with no
        counts: nothing counts a replica-ratio canary's requests."""
        labels: dict[str, Any] = {**self._labels(), gw.CANARY_LABEL: exists()}
        with self._edge("reading the canary's Deployments"):
            found = list(self.client.list(Deployment, namespace=self.namespace, labels=labels))
        for live in found:
            meta = live.metadata
            if meta is None or meta.deletionTimestamp is not None:
                continue
            return CanaryCounts(
                canary=str((meta.labels or {})[gw.CANARY_LABEL]),
                percent=int((meta.annotations or {}).get(gw.PERCENT, 0)),
                stable=Tally(),
                on_canary=Tally(),
            )
        return None



