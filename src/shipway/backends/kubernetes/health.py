"""The health gate: waiting on what was applied until it is ready, doomed, or late.

A rollout wait watches the Deployments it applied, pinned to the revision it applied, and
judges them by kubectl's rules (:mod:`.rollout` holds the pure rules); a release command's
Job is waited on in :mod:`.release_command`. Both wake on every watch event and on the lock's
expiry, and stop (LockLost) once the lock is lost: nothing may be judged, let alone rolled
back, on a slot someone else may own now.

A failure carries what a user needs to act — the reason, the message, the last exit code,
recent events and a log tail of one failing pod — with every secret value masked.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

from shipway.backends import retry
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.rollout import (
    Judge,
    Signal,
    Verdict,
    Watched,
    is_replica_set_of,
    new_pods,
    readiness_window,
)
from shipway.backends.kubernetes.sources import is_source_unit
from shipway.backends.kubernetes.state import KubernetesState, Session
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError
from shipway.plan.model import WaitRollout
from shipway.release.artifact import Artifact, Unit
from shipway.spec.model import Target

#: how long the one last look at a rollout whose watch is down at its deadline may retry
LAST_LOOK = 10.0


class KubernetesHealth(KubernetesState):
    """Rollout and Job waits, and the failures they report."""

    def _watched(self, unit: Unit) -> Watched:
        body = unit.body
        template = body["spec"]["template"]["metadata"]["annotations"][render.TEMPLATE]
        return Watched(
            process=unit.process or body["metadata"]["name"],
            deployment=body["metadata"]["name"],
            template=template,
            replicas=render.declared_replicas(body),
            generation=self._generations.get(unit.key),
            readiness_window=readiness_window(body, self.tuning),
        )

    def wait(
        self,
        target: Target,
        step: WaitRollout,
        artifact: Artifact,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        self._serves(target)
        units = [artifact.get(k) for k in step.units]
        sourced = [u for u in units if is_source_unit(u)]
        if sourced:  # a source's objects, each waited on by its kind's rule
            return self.source.wait(target, sourced, deadline, reporter)
        watched = [self._watched(u) for u in units if u.kind == "Deployment"]
        if not watched:
            return None
        temporary = self._session is None
        with self._edge(f"watching the rollout of {step.process}"):
            session = self._start_session()
        try:
            return self._wait(target, session, step.process, watched, deadline, reporter)
        finally:
            if temporary:
                self._end_session()

    def _wait(
        self,
        target: Target,
        session: Session,
        process: str,
        watched: list[Watched],
        deadline: float,
        reporter: Reporter,
        *,
        baseline: Mapping[str, Mapping[str, Any]] | None = None,
        before: Mapping[str, Mapping[str, Any]] | None = None,
        replicas: int | None = None,
    ) -> Failure | None:
        """Until every watched Deployment is done (and, with ``replicas``, asks for that
        many pods), fails, or the deadline passes. ``baseline``: the pods that existed
        before the operation (their earlier exits are not held against them); ``before``:
        the Deployments as they were then (a ReplicaFailure they showed already is not
        the new ReplicaSet's). Stops with LockLost once the lock is lost."""
        initial = session.pods.initial if baseline is None else baseline
        earlier = session.deployments.initial if before is None else before
        judges = [Judge(w, self.tuning, initial, before=earlier.get(w.deployment)) for w in watched]
        started = time.monotonic()
        with self._woken_on_lock_loss(session.changes), retry.within(deadline):
            while True:
                with session.changes.cond:
                    version = session.changes.version
                    deployments = dict(session.deployments.objects)
                    pods = list(session.pods.objects.values())
                self._still_ours(target)
                for live in (session.deployments, session.pods):
                    for note in live.take_notes():
                        reporter.line(f"  {note}")
                    if live.error:
                        raise BackendError(
                            f"watching {live.what} in {self.namespace}: {live.error}"
                        )
                now = time.monotonic()
                if now >= deadline and (session.deployments.down or session.pods.down):
                    # the watch was down when time ran out: judge what the API server
                    # shows now, not what it showed before the fault
                    deployments, pods = self._read_now(session)
                verdicts = [
                    j.assess(deployments.get(j.watched.deployment), pods, now) for j in judges
                ]
                for v in verdicts:
                    reporter.progress(process, v.counts.to_dict(), v.note)
                failed = next((v for v in verdicts if v.failure is not None), None)
                if failed is not None:
                    assert failed.failure is not None
                    return self._failure(process, failed.failure, watched)
                asked = [
                    ((deployments.get(w.deployment) or {}).get("spec") or {}).get("replicas")
                    for w in watched
                ]
                if all(v.done for v in verdicts) and (
                    replicas is None or all(n == replicas for n in asked)
                ):
                    return None
                if now >= deadline:
                    return self._timeout(process, verdicts, watched, now - started, pods)
                lock = self._lock_wake(now)
                wake = min(
                    [
                        deadline,
                        *(v.recheck_at for v in verdicts if v.recheck_at),
                        *([lock] if lock is not None else []),
                    ]
                )
                session.changes.wait_past(version, wake - now)

    def _read_now(self, session: Session) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The watched Deployments and Pods as the API server shows them now (one list
        each, retried), for a wait whose watch is down at its deadline."""
        down = session.deployments.down or session.pods.down
        with (
            self._edge(f"reading the rollout once more (its watch was down: {down})"),
            retry.within(time.monotonic() + LAST_LOOK),
        ):
            deployments = {
                d.metadata.name: d.to_dict()
                for d in self.client.list(
                    Deployment, namespace=self.namespace, labels=session.deployments.labels
                )
            }
            pods = [
                p.to_dict()
                for p in self.client.list(Pod, namespace=self.namespace, labels=session.pods.labels)
            ]
        return deployments, pods

    # -- what a failure says ---------------------------------------------------------

    def _timeout(
        self,
        process: str,
        verdicts: list[Verdict],
        watched: list[Watched],
        waited: float,
        pods: list[dict[str, Any]],
    ) -> Failure:
        pending = [(w, v) for w, v in zip(watched, verdicts, strict=True) if not v.done]
        notes = "; ".join(
            f"{w.deployment}: "
            + " ".join(f"{k} {n}" for k, n in v.counts.to_dict().items())
            + (f" ({v.note})" if v.note else "")
            for w, v in pending
        )
        first = pending[0][0] if pending else watched[0]
        details = self._events_of_deployment(first.deployment)
        unready = [p for p in new_pods(pods, first) if not _ready(p)]
        if unready:
            name = unready[0]["metadata"]["name"]
            details += self._events({"involvedObject.name": name})
        mask = self._masker()
        return Failure(
            reason=Reason.TIMEOUT,
            message=mask(f"not ready after {waited:.0f}s: {notes}"),
            process=process,
            details=tuple(mask(d) for d in details),
        )

    def _failure(self, process: str, signal: Signal, watched: list[Watched]) -> Failure:
        details: list[str] = []
        if signal.pod:
            details += self._events(fields={"involvedObject.name": signal.pod})
            details += self._log_tail(
                signal.pod, signal.container, ended=signal.exit_code is not None
            )
        else:
            details += self._events_of_deployment(watched[0].deployment)
        mask = self._masker()
        return Failure(
            reason=signal.reason,
            message=mask((f"pod {signal.pod}: " if signal.pod else "") + signal.message),
            process=process,
            exit_code=signal.exit_code,
            details=tuple(mask(d) for d in details),
        )

    def _events_of_deployment(self, deployment: str) -> list[str]:
        return self._events(
            {"involvedObject.kind": "ReplicaSet"},
            of=lambda name: is_replica_set_of(name, deployment),
        ) + self._events({"involvedObject.name": deployment})


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
