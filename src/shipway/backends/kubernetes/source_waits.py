"""Waiting on what a source applied, every kind by its own rule (:mod:`.readiness`),
pinned to the generation its apply returned, failing fast on the signals of the pods each
workload owns (the same judge as a Deployment's, :mod:`.rollout`).

Watches, not polling: one list and one watch per kind a wait needs (started before the
first apply of that kind, so what was there before is known), one for the source's pods
(started with the lock, so pods that exist then are the old ones). A wait wakes on their
events, on the end of a window, and on the lock's expiry; it stops (LockLost) once the lock
is lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.resources.storage_v1 import StorageClass

from shipway.backends import retry
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.discovery import ServedKind
from shipway.backends.kubernetes.readiness import (
    RULES,
    claim_progress,
    crd_progress,
    kstatus_progress,
)
from shipway.backends.kubernetes.rollout import (
    Counts,
    Judge,
    Progress,
    Signal,
    Verdict,
    Watched,
    readiness_window,
)
from shipway.backends.kubernetes.source_state import SourceState
from shipway.backends.kubernetes.sources import (
    POD_OF,
    TEMPLATE_PATHS,
    pod_label_value,
)
from shipway.backends.kubernetes.watch import LiveSet
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError
from shipway.release.artifact import Unit
from shipway.spec.model import Target

DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
WATCH_CACHE_WAIT = 30.0
Snapshot = tuple[dict[str, Any] | None, list[dict[str, Any]]]


def _verdict(progress: Progress) -> Verdict:
    if progress.state == "failed":
        return Verdict(failure=Signal(progress.reason, progress.why), note=progress.why)
    return Verdict(done=progress.state == "done", counts=progress.counts, note=progress.why)


class SourceWaits(SourceState):
    """The waits of a source's objects, and the watches they share."""

    _source_started: datetime | None = None

    # -- the watches -------------------------------------------------------------------

    def start_session(self) -> None:
        """A source slot's operation starts: the source's pods watched from now (those
        that exist are the old ones)."""
        self._source_started = datetime.now(UTC)
        self._watch_source_pods()

    def end_session(self) -> None:
        """The operation ends (or the backend closes): every watch of the source's
        stopped, what ``claim`` named forgotten."""
        self._stop_source_watches()

    def _watch_source_pods(self) -> LiveSet:
        src = self._src()
        if src.pods is None:
            labels = {POD_OF: pod_label_value(self.state.app.name, self.state.slot.name)}
            live = LiveSet(
                self.state._watch_loop(), Pod, self.state.namespace, src.changes, labels=labels
            )
            with self.state._edge(
                f"watching the pods of {self.state.app.name}/{self.state.slot.name}"
            ):
                live.start()
            src.pods = live
        return src.pods

    def _watch_kind(self, served: ServedKind) -> LiveSet:
        """The source's objects of one kind, watched (once per operation)."""
        src = self._src()
        key = f"{served.api_version}/{served.kind}"
        if key not in src.watches:
            src.watches[key] = self._start_watch(served)
        return src.watches[key]

    def _start_watch(self, served: ServedKind) -> LiveSet:
        """A kind a CRD of the set made served a moment ago answers 429 ("storage is
        (re)initializing") until the API server's cache of it is ready: the set's own
        retry policy asks again, for at most ``WATCH_CACHE_WAIT`` seconds."""
        live = LiveSet(
            self.state._watch_loop(),
            served.resource,
            self.state.namespace,
            self._src().changes,
            labels=self._source_labels(),
            policy=self.state.retry,
        )
        with self.state._edge(f"watching the {served.kind} objects of the source"):
            live.start(timeout=WATCH_CACHE_WAIT)
        return live

    # -- the waits -----------------------------------------------------------------------

    def wait(
        self, target: Target, mine: list[Unit], deadline: float, reporter: Reporter
    ) -> Failure | None:
        """Each of a wait step's source objects, in turn, until one fails."""
        for unit in mine:
            failure = self._wait_object(target, unit, deadline, reporter)
            if failure is not None:
                return failure
        return None

    def _wait_object(
        self, target: Target, unit: Unit, deadline: float, reporter: Reporter
    ) -> Failure | None:
        if unit.kind == "CronJob":
            return self._last_job_failure(unit, reporter)
        served = self._served(unit.body)
        objects = self._watch_kind(served)
        name = str(unit.body["metadata"]["name"])
        generation = self.state._generations.get(unit.key)
        assess: Callable[[Snapshot, float], Verdict]
        pods: LiveSet | None = None
        if unit.kind in RULES:
            pods = self._watch_source_pods()
            judge = Judge(
                self._source_watched(unit, generation),
                self.state.tuning,
                pods.initial,
                before=objects.initial.get(name),
                rule=RULES[unit.kind],
            )

            def assess(snap: Snapshot, now: float) -> Verdict:
                return judge.assess(snap[0], snap[1], now)

        elif unit.kind == "PersistentVolumeClaim":
            storage = self._storage_class(unit.body)

            def assess(snap: Snapshot, now: float) -> Verdict:
                return _verdict(claim_progress(snap[0] or {}, storage))

        elif unit.kind == "CustomResourceDefinition":

            def assess(snap: Snapshot, now: float) -> Verdict:
                return _verdict(crd_progress(snap[0] or {}))

        else:

            def assess(snap: Snapshot, now: float) -> Verdict:
                if snap[0] is None:
                    return Verdict(note="waiting for the object to be listed")
                return _verdict(kstatus_progress(snap[0], generation))

        uid = self.state._uids.get(unit.key)
        if uid:  # the object the apply made: a replaced Job's predecessor is not yet it
            judged = assess

            def assess(snap: Snapshot, now: float) -> Verdict:
                obj = snap[0]
                if obj is not None and (obj.get("metadata") or {}).get("uid") != uid:
                    obj = None
                return judged((obj, snap[1]), now)

        return self._watch_until(target, unit.key, name, objects, pods, assess, deadline, reporter)

    def _source_watched(self, unit: Unit, generation: int | None) -> Watched:
        body = unit.body
        template: Any = body
        for part in TEMPLATE_PATHS[unit.kind]:
            template = template.get(part) or {}
        spec = body.get("spec") or {}
        return Watched(
            process=unit.key,
            deployment=str(body["metadata"]["name"]),
            template=str(
                ((template.get("metadata") or {}).get("annotations") or {}).get(render.TEMPLATE, "")
            ),
            replicas=int(spec.get("replicas", spec.get("parallelism", 1)) or 1),
            generation=generation,
            readiness_window=readiness_window(body, self.state.tuning),
            match_component=False,
            completes=unit.kind == "Job",
        )

    def _watch_until(
        self,
        target: Target,
        key: str,
        name: str,
        objects: LiveSet,
        pods: LiveSet | None,
        assess: Callable[[Snapshot, float], Verdict],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        """Until ``assess`` says done or failed, or the deadline passes; LockLost once the
        lock is lost. ``name``: the object ``objects`` holds."""
        changes = objects.changes
        started = time.monotonic()
        with self.state._woken_on_lock_loss(changes), retry.within(deadline):
            while True:
                with changes.cond:
                    version = changes.version
                    obj = objects.objects.get(name)
                    seen = list(pods.objects.values()) if pods is not None else []
                self.state._still_ours(target)
                for live in (objects, pods):
                    for note in live.take_notes() if live is not None else ():
                        reporter.line(f"  {note}")
                    if live is not None and live.error:
                        raise BackendError(
                            f"watching {live.what} in {self.state.namespace}: {live.error}"
                        )
                now = time.monotonic()
                verdict = assess((obj, seen), now)
                reporter.progress(key, verdict.counts.to_dict(), verdict.note)
                if verdict.failure is not None:
                    return self._object_failure(key, name, verdict.failure)
                if verdict.done:
                    if verdict.note:
                        reporter.line(f"{key}: {verdict.note}")
                    return None
                if now >= deadline:
                    return self._object_timeout(key, name, verdict, now - started)
                lock = self.state._lock_wake(now)
                wake = min(
                    [
                        deadline,
                        *([verdict.recheck_at] if verdict.recheck_at else []),
                        *([lock] if lock is not None else []),
                    ]
                )
                changes.wait_past(version, wake - now)

    # -- what a failure says -------------------------------------------------------------

    def _object_failure(self, key: str, name: str, signal: Signal) -> Failure:
        details: list[str] = []
        if signal.pod:
            details += self.state._events({"involvedObject.name": signal.pod})
            details += self.state._log_tail(
                signal.pod, signal.container, ended=signal.exit_code is not None
            )
        else:
            details += self.state._events({"involvedObject.name": name})
        mask = self.state._masker()
        return Failure(
            reason=signal.reason,
            message=mask((f"pod {signal.pod}: " if signal.pod else "") + signal.message),
            process=key,
            exit_code=signal.exit_code,
            details=tuple(mask(d) for d in details),
        )

    def _object_timeout(self, key: str, name: str, verdict: Verdict, waited: float) -> Failure:
        counts = (
            ""
            if verdict.counts == Counts()
            else " (" + " ".join(f"{k} {n}" for k, n in verdict.counts.to_dict().items()) + ")"
        )
        why = verdict.note or "not ready"
        mask = self.state._masker()
        return Failure(
            reason=Reason.TIMEOUT,
            message=mask(f"{key} not ready after {waited:.0f}s: {why}{counts}"),
            process=key,
            details=tuple(mask(d) for d in self.state._events({"involvedObject.name": name})),
        )

    # -- kinds without pods of their own to judge --------------------------------------

    def _last_job_failure(self, unit: Unit, reporter: Reporter) -> Failure | None:
        """A CronJob is ready once applied; its last Job's failure is reported — a failure
        of this operation when that Job started after it began, a line otherwise."""
        name = str(unit.body["metadata"]["name"])
        with self.state._edge(f"reading the Jobs of {unit.key}"):
            jobs = [
                j.to_dict()
                for j in self.state.client.list(Job, namespace=self.state.namespace)
                if any(
                    o.kind == "CronJob" and o.name == name
                    for o in (j.metadata.ownerReferences or [])
                )
            ]
        if not jobs:
            return None
        last = max(jobs, key=lambda j: str(j["metadata"].get("creationTimestamp", "")))
        failed = next(
            (
                c
                for c in (last.get("status") or {}).get("conditions") or []
                if c.get("type") == "Failed" and c.get("status") == "True"
            ),
            None,
        )
        if failed is None:
            return None
        why = f"{failed.get('reason', 'Failed')}: {failed.get('message', '')}".rstrip(": ")
        job = last["metadata"]["name"]
        created = _time(last["metadata"].get("creationTimestamp"))
        started = self._source_started
        if created is not None and started is not None and created >= started:
            return self._object_failure(unit.key, job, Signal("JobFailed", f"Job {job}: {why}"))
        reporter.line(f"note: {unit.key}: its last Job {job} failed before this deploy ({why})")
        return None

    def _storage_class(self, claim: Mapping[str, Any]) -> dict[str, Any] | None:
        """The claim's StorageClass as the cluster has it (its default one when it names
        none); None when it names "" (a volume bound by hand), none exists, or it cannot
        be read."""
        wanted = (claim.get("spec") or {}).get("storageClassName")
        if wanted == "":
            return None
        try:
            if wanted:
                found: Any = self.state.client.get(StorageClass, wanted)
                return dict(found.to_dict())
            for sc in self.state.client.list(StorageClass):
                notes = sc.metadata.annotations or {} if sc.metadata else {}
                if notes.get(DEFAULT_CLASS) == "true":
                    return dict(sc.to_dict())
        except (ApiError, httpx2.HTTPError):
            return None
        return None


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
