"""PURE: is a Deployment's rollout done, still going, or doomed? Functions over object dicts.

"Done" is kubectl's rule (``rollout status``), pinned to the generation shipway applied:
the controller has observed at least that generation, and updated == spec.replicas,
replicas == updated (no old pods left), available == updated.

"Doomed" is read from the pods of the NEW ReplicaSet only — the pods whose
``shipway.io/template`` annotation is the template shipway applied — with the signals
kubelets report (see REFERENCE.md and docs/kubernetes.md):

* at once: InvalidImageName, ErrImageNeverPull, an image that is "not found",
  CreateContainerConfigError (unless the kubelet only failed to sync its cache),
  ProgressDeadlineExceeded;
* counted against an allowance (``crashes_per_replica`` per new pod, up to the desired
  replicas): container
  exits (CrashLoopBackOff, Error, OOMKilled), other image pull errors, CreateContainerError,
  RunContainerError. Exits a pod had before tracking began are not counted;
* after a window: Unschedulable, ReplicaFailure (FailedCreate), a running pod that never
  becomes ready (window from its readiness probe's own budget). A ReplicaFailure counts
  only when it is newer than the one the Deployment showed before the apply: the
  controller copies an OLD ReplicaSet's failure onto the Deployment too.

Once a rollout is done, earlier errors are forgiven. A :class:`Judge` keeps what it saw
between snapshots (strikes never go down; windows start at first sight) and is told the
time, so it is deterministic under test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shipway.backends.kubernetes.render import COMPONENT, TEMPLATE

DOOMED_AT_ONCE = frozenset({"InvalidImageName", "ErrImageNeverPull"})
PULL_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff"})
COUNTED_WAITING = frozenset({"CreateContainerError", "RunContainerError"})
NOT_FOUND = (
    "not found",
    "manifest unknown",
    "repository does not exist",
    "does not exist or no pull access",
    "pull access denied",
)


@dataclass(frozen=True)
class Tuning:
    """How patient a wait is. Defaults follow kubedog (one failure per replica) and
    kstatus (15 s for Unschedulable)."""

    crashes_per_replica: int = 1
    unschedulable_window: float = 15.0
    replica_failure_window: float = 10.0
    readiness_slack: float = 10.0
    readiness_default: float = 60.0


@dataclass(frozen=True)
class Watched:
    """One workload a wait is about (a Deployment, unless judged by another rule).

    Its new pods are those whose ``shipway.io/template`` is ``template`` (when given), of
    its process (``match_component``: shipway's own render labels pods with it), and, with
    ``image`` (container, image), those running that image in that container — how
    ``set-image`` tells the pods of its revision on a workload it did not render.
    ``completes``: a container that exits 0 is done, not crashed (a Job's pods).
    """

    process: str
    deployment: str
    template: str
    replicas: int
    generation: int | None = None
    readiness_window: float = 60.0
    match_component: bool = True
    completes: bool = False
    image: tuple[str, str] | None = None


@dataclass(frozen=True)
class Signal:
    """Why a rollout is failing, in the words a user needs."""

    reason: str
    message: str
    pod: str | None = None
    container: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class Counts:
    desired: int = 0
    updated: int = 0
    ready: int = 0
    available: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "desired": self.desired,
            "updated": self.updated,
            "ready": self.ready,
            "available": self.available,
        }


@dataclass(frozen=True)
class Verdict:
    done: bool = False
    failure: Signal | None = None
    counts: Counts = field(default_factory=Counts)
    note: str = ""
    recheck_at: float | None = None  # when a window ends (same clock as ``now``)


def readiness_window(deployment: Mapping[str, Any], tuning: Tuning) -> float:
    """How long a running pod may stay unready: its probe's own budget plus slack."""
    spec = deployment.get("spec", {}).get("template", {}).get("spec", {})
    budgets = []
    for c in spec.get("containers", []):
        probe = c.get("readinessProbe")
        if probe:
            budgets.append(
                probe.get("initialDelaySeconds", 0)
                + probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
                + probe.get("timeoutSeconds", 1)
            )
    min_ready = float(deployment.get("spec", {}).get("minReadySeconds", 0))
    if not budgets:
        return max(tuning.readiness_default, min_ready + tuning.readiness_slack)
    return float(max(budgets)) + min_ready + tuning.readiness_slack


# The suffix the Deployment controller gives its ReplicaSets: the pod-template-hash, a 32-bit
# hash safe-encoded in an alphabet without vowels (so it never spells a word such as a
# process name) and without 0, 1, 3; decimal in old versions.
_TEMPLATE_HASH = re.compile(r"[bcdfghjklmnpqrstvwxz2456789]{1,10}|[0-9]{1,10}")


def is_replica_set_of(name: str, deployment: str) -> bool:
    """Whether a ReplicaSet called ``name`` is one of ``deployment``'s: its name is the
    Deployment's plus ``-<pod-template-hash>``. Not a prefix match: ``shop-web-worker`` and a
    generation's ``shop-web-<gen>`` (and their ReplicaSets) are not ``shop-web``'s."""
    head = f"{deployment}-"
    return name.startswith(head) and _TEMPLATE_HASH.fullmatch(name[len(head) :]) is not None


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in obj.get("status", {}).get("conditions") or []}


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def new_replica_failure(
    deployment: Mapping[str, Any], before: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """The Deployment's ReplicaFailure condition, if it arose after ``before`` (the
    Deployment as it was before this operation's apply): the controller copies a failure
    of ANY of its ReplicaSets, an old one's included, so a failure already shown then is
    not the new ReplicaSet's doing. It keeps a condition's lastTransitionTime while its
    reason stays the same, so only a later transition is told apart as new."""
    failure = _conditions(deployment).get("ReplicaFailure")
    if failure is None or failure.get("status") != "True":
        return None
    old = _conditions(before).get("ReplicaFailure") if before else None
    if old is None or old.get("status") != "True":
        return failure
    now, then = _time(failure.get("lastTransitionTime")), _time(old.get("lastTransitionTime"))
    if now is not None and then is not None and now > then:
        return failure
    return None


def deployment_state(dep: Mapping[str, Any], generation: int | None) -> tuple[str, Counts, str]:
    """kubectl's rule: ("done" | "waiting" | "failed", counts, why)."""
    spec, status = dep.get("spec", {}), dep.get("status") or {}
    desired = spec.get("replicas", 1)
    counts = Counts(
        desired=desired,
        updated=status.get("updatedReplicas", 0),
        ready=status.get("readyReplicas", 0),
        available=status.get("availableReplicas", 0),
    )
    wanted = max(generation or 0, 0) or dep.get("metadata", {}).get("generation", 0)
    if status.get("observedGeneration", 0) < wanted:
        return "waiting", counts, "waiting for the controller to see the new spec"
    progressing = _conditions(dep).get("Progressing")
    if progressing and progressing.get("reason") == "ProgressDeadlineExceeded":
        return "failed", counts, progressing.get("message", "progress deadline exceeded")
    if counts.updated < desired:
        return "waiting", counts, f"{counts.updated} of {desired} updated"
    if status.get("replicas", 0) > counts.updated:
        old = status.get("replicas", 0) - counts.updated
        return "waiting", counts, f"{old} old replicas pending termination"
    if counts.available < counts.updated:
        return "waiting", counts, f"{counts.available} of {counts.updated} updated available"
    return "done", counts, ""


@dataclass(frozen=True)
class Progress:
    """Where a workload's rollout stands by its kind's rule: ``done``, ``waiting`` or
    ``failed`` (then ``reason`` says why, in the engine's word)."""

    state: str
    counts: Counts
    why: str = ""
    reason: str = ""


Rule = Callable[[Mapping[str, Any], "int | None"], Progress]


def deployment_progress(dep: Mapping[str, Any], generation: int | None) -> Progress:
    state, counts, why = deployment_state(dep, generation)
    return Progress(state, counts, why, "ProgressDeadlineExceeded")


def _statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(
        status.get("containerStatuses") or []
    )


def _exits(cs: Mapping[str, Any], completes: bool = False) -> int:
    """Times a container has exited: its restarts, plus one if it lies exited now (with
    ``completes``, an exit 0 is a finished task, not a crash)."""
    state = cs.get("state") or {}
    ended = state.get("terminated")
    if ended and completes and ended.get("exitCode") == 0:
        ended = None
    return int(cs.get("restartCount", 0)) + (1 if ended else 0)


def _runs(pod: Mapping[str, Any], container: str, image: str) -> bool:
    spec = pod.get("spec") or {}
    every = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    return any(c.get("name") == container and c.get("image") == image for c in every)


def _last_exit(cs: Mapping[str, Any]) -> Mapping[str, Any]:
    state = cs.get("state") or {}
    return state.get("terminated") or (cs.get("lastState") or {}).get("terminated") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def new_pods(pods: Iterable[Mapping[str, Any]], watched: Watched) -> list[Mapping[str, Any]]:
    """Pods of the ReplicaSet made from the template shipway applied, not being deleted."""
    out = []
    for pod in pods:
        meta = pod.get("metadata", {})
        if meta.get("deletionTimestamp"):
            continue
        if watched.match_component and (meta.get("labels") or {}).get(COMPONENT) != watched.process:
            continue
        if watched.template and (meta.get("annotations") or {}).get(TEMPLATE) != watched.template:
            continue
        if watched.image is not None and not _runs(pod, *watched.image):
            continue
        out.append(pod)
    return sorted(out, key=_name)


class Judge:
    """Assesses one workload's rollout, snapshot after snapshot: a Deployment by kubectl's
    rule, or another kind by its ``rule`` (:mod:`.readiness`)."""

    def __init__(
        self,
        watched: Watched,
        tuning: Tuning,
        baseline: Mapping[str, Mapping[str, Any]] | None = None,
        before: Mapping[str, Any] | None = None,
        rule: Rule = deployment_progress,
    ) -> None:
        self.watched = watched
        self.tuning = tuning
        self.rule = rule
        # The Deployment before this operation applied it (None: it did not exist).
        self.before = before
        # Pods that existed before tracking: exits they had then are not counted.
        self.baseline: dict[tuple[str, str], int] = {}
        for pod in (baseline or {}).values():
            for cs in _statuses(pod):
                self.baseline[(_name(pod), cs.get("name", ""))] = _exits(cs, watched.completes)
        self.strikes: dict[tuple[str, str], int] = {}
        self.exits_seen: dict[tuple[str, str], int] = {}
        self.last_waiting: dict[tuple[str, str], str] = {}
        self.first_seen: dict[tuple[str, str], float] = {}
        self.latest: Signal | None = None
        self.seen: set[str] = set()

    # -- windows ----------------------------------------------------------------------

    def _window(self, key: tuple[str, str], now: float, length: float) -> tuple[bool, float]:
        start = self.first_seen.setdefault(key, now)
        return now - start >= length, start + length

    def _forget(self, key: tuple[str, str]) -> None:
        self.first_seen.pop(key, None)

    # -- the assessment -----------------------------------------------------------------

    def assess(
        self, deployment: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]], now: float
    ) -> Verdict:
        w = self.watched
        if deployment is None:
            return Verdict(counts=Counts(desired=w.replicas), note="waiting for the Deployment")
        progress = self.rule(deployment, w.generation)
        state, counts, why = progress.state, progress.counts, progress.why
        if state == "done":
            return Verdict(done=True, counts=counts)
        if state == "failed":
            return Verdict(failure=Signal(progress.reason, why), counts=counts, note=why)
        rechecks: list[float] = []
        failure = self._signals(deployment, pods, counts, now, rechecks)
        note = why
        total = sum(self.strikes.values())
        if total:
            note += f"; {total} failure{'s' if total != 1 else ''} seen"
        return Verdict(
            failure=failure,
            counts=counts,
            note=note,
            recheck_at=min(rechecks) if rechecks else None,
        )

    def _signals(
        self,
        deployment: Mapping[str, Any],
        pods: Iterable[Mapping[str, Any]],
        counts: Counts,
        now: float,
        rechecks: list[float],
    ) -> Signal | None:
        failure = self._deployment_conditions(deployment, now, rechecks)
        for pod in new_pods(pods, self.watched):
            self.seen.add(_name(pod))
            doomed = self._pod(pod, now, rechecks)
            failure = failure or doomed
        return failure or self._over_allowance(counts)

    def health(
        self, deployment: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], now: float
    ) -> Signal | None:
        """A workload held after its rollout (a replica-ratio canary at its share): its new
        pods' signals even while the Deployment counts as done — a pod that crashed and came
        back is still a crash — or the Deployment's own failure."""
        progress = self.rule(deployment, self.watched.generation)
        if progress.state == "failed":
            return Signal(progress.reason, progress.why)
        return self._signals(deployment, pods, progress.counts, now, [])

    def _deployment_conditions(
        self, deployment: Mapping[str, Any], now: float, rechecks: list[float]
    ) -> Signal | None:
        failure = new_replica_failure(deployment, self.before)
        key = ("(deployment)", "ReplicaFailure")
        if failure is None:
            self._forget(key)
            return None
        over, at = self._window(key, now, self.tuning.replica_failure_window)
        if not over:
            rechecks.append(at)
            return None
        return Signal(
            failure.get("reason") or "ReplicaFailure",
            failure.get("message") or "the ReplicaSet cannot create pods",
        )

    def _pod(self, pod: Mapping[str, Any], now: float, rechecks: list[float]) -> Signal | None:
        name = _name(pod)
        doomed = self._scheduling(pod, name, now, rechecks)
        for cs in _statuses(pod):
            found = self._container(name, cs)
            doomed = doomed or found
        return doomed or self._readiness(pod, name, now, rechecks)

    def _scheduling(
        self, pod: Mapping[str, Any], name: str, now: float, rechecks: list[float]
    ) -> Signal | None:
        scheduled = _conditions(pod).get("PodScheduled")
        key = (name, "(scheduling)")
        if not scheduled or scheduled.get("status") != "False":
            self._forget(key)
            return None
        if scheduled.get("reason") != "Unschedulable":
            return None
        over, at = self._window(key, now, self.tuning.unschedulable_window)
        if not over:
            rechecks.append(at)
            return None
        return Signal(
            "Unschedulable",
            scheduled.get("message") or "no node can run this pod",
            pod=name,
        )

    def _container(self, pod: str, cs: Mapping[str, Any]) -> Signal | None:
        """Count this container's failures; return a signal if it is doomed at once."""
        container = cs.get("name", "")
        key = (pod, container)
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        message = waiting.get("message", "")
        previous = self.last_waiting.get(key, "")
        self.last_waiting[key] = reason

        if reason in DOOMED_AT_ONCE:
            return Signal(reason, message or reason, pod, container)
        if reason == "CreateContainerConfigError":
            if "failed to sync" in message and "cache" in message:
                return None
            return Signal(reason, message or reason, pod, container)
        if reason in PULL_ERRORS:
            if any(marker in message.lower() for marker in NOT_FOUND):
                return Signal(reason, message, pod, container)
            if reason == "ErrImagePull" and previous != "ErrImagePull":
                self._strike(key, Signal(reason, message or reason, pod, container))
            return None
        if reason in COUNTED_WAITING:
            if previous != reason:
                self._strike(key, Signal(reason, message or reason, pod, container))
            return None

        # Exits are counted apart from the strikes: a container's strikes also hold its
        # pull and create errors, and only the exits it had since we last looked are new.
        exits = _exits(cs, self.watched.completes) - self.baseline.get(key, 0)
        seen = self.exits_seen.get(key, 0)
        if exits > seen:
            last = _last_exit(cs)
            why = "OOMKilled" if last.get("reason") == "OOMKilled" else "CrashLoopBackOff"
            text = f"container {container} exited"
            if last.get("reason"):
                text += f" ({last['reason']})"
            self.exits_seen[key] = exits
            self.strikes[key] = self.strikes.get(key, 0) + exits - seen
            self.latest = Signal(why, text, pod, container, last.get("exitCode"))
        return None

    def _strike(self, key: tuple[str, str], signal: Signal) -> None:
        self.strikes[key] = self.strikes.get(key, 0) + 1
        self.latest = signal

    def _readiness(
        self, pod: Mapping[str, Any], name: str, now: float, rechecks: list[float]
    ) -> Signal | None:
        status = pod.get("status") or {}
        statuses = list(status.get("containerStatuses") or [])
        key = (name, "(readiness)")
        running = statuses and all((cs.get("state") or {}).get("running") for cs in statuses)
        unready = [cs.get("name", "") for cs in statuses if not cs.get("ready")]
        if status.get("phase") != "Running" or not running or not unready:
            self._forget(key)
            return None
        over, at = self._window(key, now, self.watched.readiness_window)
        if not over:
            rechecks.append(at)
            return None
        return Signal(
            "NotReady",
            f"container {', '.join(unready)} running but not ready for "
            f"{self.watched.readiness_window:g}s (readiness probe failing)",
            pod=name,
            container=unready[0],
        )

    def _over_allowance(self, counts: Counts) -> Signal | None:
        """Failures beyond the allowance: ``crashes_per_replica`` for each new pod seen so
        far (at most the desired replicas). A rolling update with maxSurge 1 starts one new
        pod at a time; an allowance for pods that do not exist yet would only delay the
        verdict on the ones that do."""
        total = sum(self.strikes.values())
        pods = min(max(1, counts.desired), max(1, len(self.seen)))
        allowance = self.tuning.crashes_per_replica * pods
        if total <= allowance or self.latest is None:
            return None
        failing = len({pod for (pod, _), n in self.strikes.items() if n})
        latest = self.latest
        return Signal(
            latest.reason,
            f"{latest.message}; {total} failures in {failing} new "
            f"pod{'s' if failing != 1 else ''} (allowance {allowance})",
            latest.pod,
            latest.container,
            latest.exit_code,
        )
