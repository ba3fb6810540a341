"""PURE: is an object a source applied ready, still going, or failed? One rule per kind,
over object dicts, pinned to the ``metadata.generation`` the apply returned.

* StatefulSet and DaemonSet: kubectl's ``rollout status`` rules (REFERENCE.md):
  a StatefulSet is done when the controller has observed the generation, ``readyReplicas``
  reached ``spec.replicas``, and either its partition's share is updated or
  ``updateRevision == currentRevision``; a DaemonSet when ``updatedNumberScheduled`` and
  ``numberAvailable`` reached ``desiredNumberScheduled``;
* Job: until its ``Complete`` or ``Failed`` condition;
* CronJob: ready once the API server took it (its Jobs run on its schedule, later); the
  wait reports its last Job's failure, ``status`` shows its last Job and how it ended;
* PersistentVolumeClaim: ``Bound`` where a provisioner will bind it (a StorageClass with
  Immediate binding and a real provisioner); a claim whose class waits for its first
  consumer, or that nothing would provision, is ready once applied, and said so;
* CustomResourceDefinition: ``Established`` (``NamesAccepted=False`` fails it);
* anything else, kstatus-style: ``status.observedGeneration`` caught up, ``Stalled`` fails,
  ``Reconciling`` waits, a ``Ready`` or ``Available`` condition must be True; an object
  with no status is ready once applied. A controller that never reports is bounded by the
  deploy's timeout, and the timeout says which condition never came.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shipway.backends.kubernetes.rollout import Counts, Progress, Rule, deployment_progress

NO_PROVISIONER = "kubernetes.io/no-provisioner"


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


def _observed(obj: Mapping[str, Any], generation: int | None) -> bool:
    status = obj.get("status") or {}
    wanted = max(generation or 0, 0) or (obj.get("metadata") or {}).get("generation", 0)
    return int(status.get("observedGeneration") or 0) >= int(wanted or 0)


def statefulset_progress(sts: Mapping[str, Any], generation: int | None) -> Progress:
    spec, status = sts.get("spec") or {}, sts.get("status") or {}
    desired = int(spec.get("replicas", 1))
    counts = Counts(
        desired=desired,
        updated=int(status.get("updatedReplicas") or 0),
        ready=int(status.get("readyReplicas") or 0),
        available=int(status.get("availableReplicas") or 0),
    )
    if not status.get("observedGeneration") or not _observed(sts, generation):
        return Progress("waiting", counts, "waiting for the controller to see the new spec")
    if counts.ready < desired:
        return Progress("waiting", counts, f"{counts.ready} of {desired} pods ready")
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return Progress("done", counts, "OnDelete: pods change when they are deleted")
    partition = (strategy.get("rollingUpdate") or {}).get("partition")
    if partition:
        if counts.updated < desired - int(partition):
            return Progress("waiting", counts, f"{counts.updated} of {desired - partition} updated")
        return Progress("done", counts)
    if status.get("updateRevision") != status.get("currentRevision"):
        return Progress(
            "waiting",
            counts,
            f"{counts.updated} pods at revision {status.get('updateRevision')}",
        )
    return Progress("done", counts)


def daemonset_progress(ds: Mapping[str, Any], generation: int | None) -> Progress:
    status = ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    counts = Counts(
        desired=desired,
        updated=int(status.get("updatedNumberScheduled") or 0),
        ready=int(status.get("numberReady") or 0),
        available=int(status.get("numberAvailable") or 0),
    )
    if not _observed(ds, generation):
        return Progress("waiting", counts, "waiting for the controller to see the new spec")
    strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return Progress("done", counts, "OnDelete: pods change when they are deleted")
    if counts.updated < desired:
        return Progress("waiting", counts, f"{counts.updated} of {desired} updated")
    if counts.available < desired:
        return Progress("waiting", counts, f"{counts.available} of {desired} available")
    return Progress("done", counts)


def job_progress(job: Mapping[str, Any], generation: int | None) -> Progress:
    status = job.get("status") or {}
    spec = job.get("spec") or {}
    completions = int(spec.get("completions") or spec.get("parallelism") or 1)
    counts = Counts(
        desired=completions,
        updated=int(status.get("succeeded") or 0),
        ready=int(status.get("ready") or 0),
        available=int(status.get("active") or 0),
    )
    conditions = _conditions(job)
    if conditions.get("Complete", {}).get("status") == "True":
        return Progress("done", counts)
    failed = conditions.get("Failed", {})
    if failed.get("status") == "True":
        return Progress(
            "failed",
            counts,
            f"{failed.get('reason', 'Failed')}: {failed.get('message', '')}".rstrip(": "),
            "JobFailed",
        )
    return Progress("waiting", counts, f"{counts.updated} of {completions} completed")


def last_job_of(
    cronjob: Mapping[str, Any], jobs: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The newest of ``jobs`` a CronJob owns (by its uid, or its name when it has none)."""
    meta = cronjob.get("metadata") or {}
    uid, name = meta.get("uid"), meta.get("name")

    def owned(job: Mapping[str, Any]) -> bool:
        return any(
            o.get("kind") == "CronJob" and (o.get("uid") == uid if uid else o.get("name") == name)
            for o in (job.get("metadata") or {}).get("ownerReferences") or []
        )

    mine = [j for j in jobs if owned(j)]
    if not mine:
        return None
    return max(mine, key=lambda j: str((j.get("metadata") or {}).get("creationTimestamp", "")))


def job_outcome(job: Mapping[str, Any]) -> tuple[str, str]:
    """("complete" | "failed" | "running", why it failed)."""
    conditions = _conditions(job)
    if conditions.get("Complete", {}).get("status") == "True":
        return "complete", ""
    failed = conditions.get("Failed", {})
    if failed.get("status") == "True":
        return "failed", f"{failed.get('reason', 'Failed')}: {failed.get('message', '')}".rstrip(
            ": "
        )
    return "running", ""


RULES: Mapping[str, Rule] = {
    "Deployment": deployment_progress,
    "StatefulSet": statefulset_progress,
    "DaemonSet": daemonset_progress,
    "Job": job_progress,
}
#: Kinds whose pods a wait judges (fail fast on their signals).
POD_OWNERS = frozenset(RULES)


def crd_progress(crd: Mapping[str, Any]) -> Progress:
    conditions = _conditions(crd)
    names = conditions.get("NamesAccepted", {})
    if names.get("status") == "False":
        return Progress("failed", Counts(), names.get("message", ""), "NamesNotAccepted")
    if conditions.get("Established", {}).get("status") == "True":
        return Progress("done", Counts())
    return Progress("waiting", Counts(), "waiting for Established")


def claim_progress(pvc: Mapping[str, Any], storage_class: Mapping[str, Any] | None) -> Progress:
    """``storage_class``: the claim's class as the cluster has it (None: none by that name,
    or it cannot be read)."""
    phase = (pvc.get("status") or {}).get("phase")
    if phase == "Bound":
        return Progress("done", Counts())
    if phase == "Lost":
        return Progress("failed", Counts(), "its volume is lost", "ClaimLost")
    if storage_class is None:
        return Progress("done", Counts(), "no provisioner known: it binds when a volume is made")
    if storage_class.get("provisioner") == NO_PROVISIONER:
        return Progress("done", Counts(), "its class has no provisioner: ready once applied")
    if storage_class.get("volumeBindingMode") == "WaitForFirstConsumer":
        return Progress("done", Counts(), "it binds when its first pod is scheduled")
    return Progress("waiting", Counts(), f"waiting for Bound (phase {phase or 'Pending'})")


def kstatus_progress(obj: Mapping[str, Any], generation: int | None) -> Progress:
    status = obj.get("status")
    if not status:
        return Progress("done", Counts())
    if "observedGeneration" in status and not _observed(obj, generation):
        return Progress(
            "waiting",
            Counts(),
            f"its controller has not observed generation {generation} "
            f"(observedGeneration {status.get('observedGeneration')})",
        )
    conditions = _conditions(obj)
    stalled = conditions.get("Stalled", {})
    if stalled.get("status") == "True":
        return Progress("failed", Counts(), stalled.get("message", ""), "Stalled")
    if conditions.get("Reconciling", {}).get("status") == "True":
        return Progress("waiting", Counts(), "Reconciling")
    for ready in ("Ready", "Available"):
        if ready in conditions:
            c = conditions[ready]
            if c.get("status") == "True":
                return Progress("done", Counts())
            why = f": {c['message']}" if c.get("message") else ""
            return Progress("waiting", Counts(), f"{ready} is {c.get('status')}{why}")
    return Progress("done", Counts())
