"""The steps of a rolling plan, one at a time, and the release records they leave.

Every method here mutates the slot, so each starts with the one guard preamble
(``self._guard``): the clearance covers the target, the target is the one this backend
serves, the Lease is still ours. Objects are sent by server-side apply (field manager
``shipway``) with their placeholders replaced by the secret values, which are remembered
so that no later message shows one.
"""

from __future__ import annotations

import base64
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.operators import exists
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.types import CascadeType

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.health import KubernetesHealth
from shipway.backends.kubernetes.hosts import KubernetesHosts
from shipway.backends.kubernetes.state import RESOURCES
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import CleanupFailed
from shipway.guard import Clearance
from shipway.plan.model import Remove
from shipway.release.artifact import Unit
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret, reveal


class KubernetesSteps(KubernetesHealth, KubernetesHosts):
    """Records, apply, remove, the release command and stop (the waits are health's)."""

    def write_records(
        self, clearance: Clearance, target: Target, records: Sequence[Release]
    ) -> None:
        self._guard(clearance, target)
        with self._edge(f"writing the release records of {target}"):
            self._store().write(records)

    def delete_records(
        self, clearance: Clearance, target: Target, revisions: Sequence[int]
    ) -> None:
        self._guard(clearance, target)
        with self._edge(f"deleting old release records of {target}"):
            self._store().delete(revisions)

    def apply(
        self,
        clearance: Clearance,
        target: Target,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None:
        self._guard(clearance, target)
        self._secrets.update(secrets)
        body = manifest(unit, secrets)
        routed = unit.kind == "Ingress" and unit.generation is None  # a rolling slot's host
        with self._edge(f"applying {unit.key}"):
            before = self._live("Ingress", str(unit.body["metadata"]["name"])) if routed else None
            try:
                applied = self.client.apply(from_dict(body), force=True)
            except ApiError as exc:
                if unit.kind != "Namespace" or exc.status.code != 403:
                    raise
                # We hold a Lease in it, so it exists; labelling it needs cluster rights.
                reporter.line(
                    f"namespace {self.namespace}: no rights to manage the Namespace object "
                    "itself (a namespace-scoped identity); using it as it is"
                )
                return
        if routed:
            self._take_routed(unit, before, reporter)
        if unit.kind == "Deployment" and applied.metadata is not None:
            self._generations[unit.key] = int(applied.metadata.generation or 0)
            live = applied.spec.replicas if applied.spec is not None else None
            wanted = render.declared_replicas(unit.body)
            if unit.generation and action in ("create", "start") and live != wanted:
                # Applied without a count (it defaults to 1), or stopped: the declared
                # count, set where Scale sets it.
                name = str(unit.body["metadata"]["name"])
                with self._edge(f"scaling {name} to {wanted}"):
                    self._scale_to(name, wanted)

    def remove(
        self, clearance: Clearance, target: Target, step: Remove, reporter: Reporter
    ) -> None:
        self._guard(clearance, target)
        kind, name = render.split_key(step.unit)
        if kind == "Namespace" or kind not in RESOURCES:
            raise CleanupFailed(
                f"{step.unit} is not removed by shipway",
                f"delete {step.unit} yourself if it is no longer needed",
            )
        fix = f"delete {kind} {name} in namespace {self.namespace}"
        with self._edge(f"removing {step.unit}", cleanup_fix=fix):
            try:
                self.client.delete(
                    RESOURCES[kind], name, namespace=self.namespace, cascade=CascadeType.BACKGROUND
                )
            except ApiError as exc:
                if exc.status.code != 404:
                    raise

    def run_release_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        command: Sequence[str],
        secrets: Mapping[str, Secret],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        """Run the release command as a Job of the release's image and wait until it is
        Complete or Failed, or the deadline passes. Never two at once, never one left
        running: one an earlier, killed run left unfinished is deleted first; the Job
        carries the deadline (``activeDeadlineSeconds``: the cluster stops it even if this
        process is killed), and on a timeout, an interruption or a pod that can never run
        (judged as a Deployment's pods are) it is deleted, its pod with it."""
        self._guard(clearance, target)
        self._secrets.update(secrets)
        self._delete_unfinished_jobs(reporter)
        seconds = max(1, math.ceil(deadline - time.monotonic()))
        body = render.release_job(release, self.namespace, list(command), deadline=seconds)
        name = body["metadata"]["name"]
        with self._edge(f"starting the release command (Job {name})"):
            self.client.apply(from_dict(body), force=True)
        try:
            failure = self._wait_job(target, name, deadline)
        except BaseException:  # interrupted (a signal), or the lock lost: stop it there
            self._delete_job(name, reporter, "stopped: the deploy was interrupted")
            raise
        if failure is not None and failure.reason == Reason.RELEASE_COMMAND_TIMEOUT:
            self._delete_job(name, reporter, "stopped: it did not finish in time")
        elif failure is not None and failure.reason != Reason.RELEASE_COMMAND_FAILED:
            # its pod can never run (unschedulable, an image not found): not left pending
            self._delete_job(name, reporter, f"stopped: it cannot run ({failure.reason})")
        return failure

    def _delete_job(self, name: str, reporter: Reporter, why: str) -> None:
        """Delete the release command's Job and its pod (best effort: said, never raised;
        the Job's own deadline stops it anyway)."""
        try:
            self.client.delete(Job, name, namespace=self.namespace, cascade=CascadeType.BACKGROUND)
        except ApiError as exc:
            if exc.status.code != 404:
                reporter.line(f"warning: deleting Job {name} failed ({exc}); its deadline stops it")
                return
        except httpx2.HTTPError as exc:
            reporter.line(f"warning: deleting Job {name} failed ({exc}); its deadline stops it")
            return
        reporter.line(f"  Job {name} deleted ({why})")

    def _delete_unfinished_jobs(self, reporter: Reporter) -> None:
        """Under the slot's lock no release command Job can be this operation's: one not
        finished was left by a run killed before it could stop it, and is deleted (with
        its pod) before another starts. Finished ones stay for their logs."""
        with self._edge("looking for release command Jobs left by earlier runs"):
            jobs = list(
                self.client.list(
                    Job,
                    namespace=self.namespace,
                    labels={**self._labels(), render.RELEASE_COMMAND: exists()},
                )
            )
        for job in jobs:
            conditions = (job.status.conditions or []) if job.status else []
            if any(c.type in ("Complete", "Failed") and c.status == "True" for c in conditions):
                continue
            self._delete_job(
                str(job.metadata.name), reporter, "left unfinished by an earlier run, killed"
            )

    def stop(self, clearance: Clearance, target: Target, reporter: Reporter) -> None:
        """Scale every process of the slot to zero (records and objects stay)."""
        self._guard(clearance, target)
        with self._edge(f"stopping {target}"):
            for dep in self.client.list(
                Deployment, namespace=self.namespace, labels=self._labels()
            ):
                self.client.patch(
                    Deployment,
                    dep.metadata.name,
                    {"spec": {"replicas": 0}},
                    namespace=self.namespace,
                )
                reporter.line(f"scaled {dep.metadata.name} to 0")


def manifest(unit: Unit, secrets: Mapping[str, Secret]) -> dict[str, Any]:
    """What is sent: placeholders replaced by values, Secret ``stringData`` as ``data``
    (server-side apply tracks ``data``; fields applied as stringData could never be
    removed again), the unit digest as an annotation."""
    body: dict[str, Any] = reveal(render.with_digest(unit), secrets)
    if body.get("kind") == "Secret" and "stringData" in body:
        data = body.pop("stringData")
        body["data"] = {k: base64.b64encode(str(v).encode()).decode() for k, v in data.items()}
    return body
