"""The release command (migrations) in the cluster: a Job of the release's image, run once
before any new process starts, waited on until Complete or Failed — or until its pod is
doomed, judged by the rules of a Deployment's pods (:mod:`.rollout`) — or the deadline.

Never two at once, never one left running: an unfinished Job an earlier, killed run left is
deleted first; the Job carries the deadline (``activeDeadlineSeconds``: the cluster stops it
even if this process is killed), and on a timeout, a doomed pod or an interruption it is
deleted, its pod with it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.operators import exists
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType

from shipway.backends import retry
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.health import KubernetesHealth
from shipway.backends.kubernetes.readiness import job_progress
from shipway.backends.kubernetes.rollout import Judge, Signal, Watched
from shipway.backends.kubernetes.watch import Changes, LiveSet
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError
from shipway.guard import Clearance
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret


class KubernetesReleaseCommand(KubernetesHealth):
    """run_release_command."""

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
        elif failure is None:  # its own output, as the Docker and local backends show it
            mask = self._masker()
            for pod in self._job_pods(name)[:1]:
                for line in self._log_tail(pod.metadata.name, "release", ended=True):
                    reporter.line(mask(f"  release command: {line.removeprefix('log: ')}"))
        return failure

    def _job_pods(self, name: str) -> list[Any]:
        """The pods of the Job ``name`` (none when they cannot be listed: best effort)."""
        try:
            return list(self.client.list(Pod, namespace=self.namespace, labels={"job-name": name}))
        except (ApiError, httpx2.HTTPError):
            return []

    def _wait_job(self, target: Target, name: str, deadline: float) -> Failure | None:
        """Until the Job ``name`` is Complete (→ None) or Failed, or the deadline passes,
        or its pod is doomed: judged by the rules of a Deployment's pods (:mod:`.rollout`:
        an image that is not found at once, Unschedulable after its window …), so a pod
        that can never run fails the release command with the reason, not at the
        timeout."""
        changes = Changes()
        jobs = LiveSet(
            self._watch_loop(),
            Job,
            self.namespace,
            changes,
            fields={"metadata.name": name},
            policy=self.retry,
        )
        pods = LiveSet(
            self._watch_loop(),
            Pod,
            self.namespace,
            changes,
            labels={"job-name": name},
            policy=self.retry,
        )
        # every pod of this Job is its own (an unfinished one of an earlier run was deleted
        # with its Job): none is baseline. A task is not judged by readiness (its container
        # has no probes); one that runs too long is the timeout's.
        watched = Watched(
            process=name,
            deployment=name,
            template="",
            replicas=1,
            readiness_window=math.inf,
            match_component=False,
            completes=True,
        )
        judge = Judge(watched, self.tuning, {}, rule=job_progress)
        try:
            with self._edge(f"watching Job {name}"):
                jobs.start()
                pods.start()
            with self._woken_on_lock_loss(changes), retry.within(deadline):
                while True:
                    with changes.cond:
                        version = changes.version
                        job = jobs.objects.get(name)
                        seen = list(pods.objects.values())
                    self._still_ours(target)
                    for live in (jobs, pods):
                        for note in live.take_notes():
                            self.retry.say(f"  {note}")
                        if live.error:
                            what = "Job" if live is jobs else "the pods of Job"
                            raise BackendError(f"watching {what} {name}: {live.error}")
                    conditions = {
                        c.get("type"): c
                        for c in ((job or {}).get("status") or {}).get("conditions") or []
                    }
                    if conditions.get("Complete", {}).get("status") == "True":
                        return None
                    failed = conditions.get("Failed", {})
                    # the cluster stopped it at its activeDeadlineSeconds: a timeout
                    over = failed.get("reason") == "DeadlineExceeded"
                    if failed.get("status") == "True" and not over:
                        return self._job_failure(name, failed)
                    now = time.monotonic()
                    verdict = judge.assess(job, seen, now)
                    if verdict.failure is not None and not over:
                        return self._job_doomed(name, verdict.failure)
                    if now >= deadline or over:
                        mask = self._masker()
                        return Failure(
                            reason=Reason.RELEASE_COMMAND_TIMEOUT,
                            message=f"the release command (Job {name}) did not finish in time",
                            details=tuple(
                                mask(d) for d in self._events({"involvedObject.name": name})
                            ),
                        )
                    lock = self._lock_wake(now)
                    wake = min(
                        [
                            deadline,
                            *([verdict.recheck_at] if verdict.recheck_at else []),
                            *([lock] if lock is not None else []),
                        ]
                    )
                    changes.wait_past(version, wake - now)
        finally:
            jobs.stop()
            pods.stop()

    def _job_doomed(self, name: str, signal: Signal) -> Failure:
        """The release command's pod can never finish (it cannot be scheduled, its image is
        not found …): the reason as the cluster gives it, as a Deployment's pod would."""
        details: list[str] = []
        if signal.pod:
            details += self._events({"involvedObject.name": signal.pod})
            details += self._log_tail(
                signal.pod, signal.container, ended=signal.exit_code is not None
            )
        else:
            details += self._events({"involvedObject.name": name})
        mask = self._masker()
        return Failure(
            reason=signal.reason,
            message=mask(
                f"the release command (Job {name}) cannot run: "
                + (f"pod {signal.pod}: " if signal.pod else "")
                + signal.message
            ),
            exit_code=signal.exit_code,
            details=tuple(mask(d) for d in details),
        )

    def _job_failure(self, name: str, condition: Mapping[str, Any]) -> Failure:
        details: list[str] = []
        exit_code = None
        for pod in self._job_pods(name)[:1]:
            for cs in (pod.status.containerStatuses or []) if pod.status else []:
                term = cs.state.terminated if cs.state else None
                if term is not None:
                    exit_code = term.exitCode
            details += self._events({"involvedObject.name": pod.metadata.name})
            details += self._log_tail(pod.metadata.name, "release", ended=True)
        mask = self._masker()
        return Failure(
            reason=Reason.RELEASE_COMMAND_FAILED,
            message=mask(
                f"Job {name}: {condition.get('reason', 'Failed')}: {condition.get('message', '')}"
            ).rstrip(": "),
            exit_code=exit_code,
            details=tuple(mask(d) for d in details),
        )

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
