"""The rollout judge (pure), on status sequences recorded from the test control plane
(``statuses/<behaviour>.json``, re-recorded by ``statuses/record.py``) and on hand-made
objects for the signals the simulated kubelet does not produce."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.kubernetes.render import COMPONENT, TEMPLATE
from shipway.backends.kubernetes.rollout import (
    Judge,
    Tuning,
    Verdict,
    Watched,
    deployment_state,
    is_replica_set_of,
    readiness_window,
)

STATUSES = Path(__file__).parent / "statuses"


def recording(behaviour: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((STATUSES / f"{behaviour}.json").read_text())
    return data


def replay(
    behaviour: str,
    tuning: Tuning | None = None,
    *,
    until: float | None = None,
    baseline_at: float | None = None,
) -> tuple[float, Verdict, Judge]:
    """Feed the recorded changes to a judge in order; return (time, verdict) of the first
    verdict that is done or failed, else of the last one (at ``until``)."""
    rec = recording(behaviour)
    watched = Watched(
        process="web",
        deployment="rec-web",
        template=rec["template"],
        replicas=2,
        generation=1,
        readiness_window=60.0,
    )
    deployment: dict[str, Any] | None = None
    pods: dict[str, dict[str, Any]] = {}
    events = rec["events"]
    baseline: dict[str, dict[str, Any]] = {}
    if baseline_at is not None:
        for e in events:
            if e["t"] <= baseline_at and e["kind"] == "Pod":
                baseline[e["object"]["metadata"]["name"]] = e["object"]
        events = [e for e in events if e["t"] > baseline_at]
    judge = Judge(watched, tuning or Tuning(), baseline)
    if baseline_at is not None:
        pods = dict(baseline)
        deployment = next(
            (
                e["object"]
                for e in reversed(rec["events"])
                if e["kind"] == "Deployment" and e["t"] <= baseline_at
            ),
            None,
        )
    verdict = Verdict()
    t = 0.0
    for event in events:
        t = event["t"]
        obj = event["object"]
        if event["kind"] == "Deployment":
            deployment = obj
        else:
            pods[obj["metadata"]["name"]] = obj
        verdict = judge.assess(deployment, pods.values(), t)
        if verdict.done or verdict.failure:
            return t, verdict, judge
    if until is not None:
        t = until
        verdict = judge.assess(deployment, pods.values(), t)
    return t, verdict, judge


def first_signal(behaviour: str) -> float:
    """When the first pod showed a failure (a terminated container or a waiting reason)."""
    for e in recording(behaviour)["events"]:
        for cs in e["object"]["status"].get("containerStatuses") or []:
            state = cs.get("state") or {}
            if state.get("terminated") or (state.get("waiting") or {}).get("reason"):
                return float(e["t"])
    raise AssertionError("no failure signal in the recording")


def test_a_healthy_rollout_is_done_quickly_and_never_failed() -> None:
    t, verdict, _ = replay("default")
    assert verdict.done and verdict.failure is None
    assert verdict.counts.available == verdict.counts.desired == 2
    assert t < 3


def test_a_crash_loop_fails_within_5s_of_the_first_crash_with_its_exit_code() -> None:
    t, verdict, _ = replay("crashloop")
    assert verdict.failure is not None and not verdict.done
    assert verdict.failure.reason == "CrashLoopBackOff"
    assert verdict.failure.exit_code == 1
    assert "allowance 2" in verdict.failure.message
    assert verdict.failure.pod and verdict.failure.container == "web"
    assert t - first_signal("crashloop") <= 5.0


def test_one_crash_per_new_pod_is_allowed() -> None:
    rec = recording("crashloop")
    first_two = sorted(
        {
            e["t"]
            for e in rec["events"]
            if e["kind"] == "Pod"
            and (e["object"]["status"].get("containerStatuses") or [{}])[0]
            .get("state", {})
            .get("terminated")
        }
    )[:2]
    # right after both pods crashed once: two failures, allowance two — still waiting
    _, verdict, judge = replay("crashloop", until=first_two[1])
    assert sum(judge.strikes.values()) <= 2 or verdict.failure is not None
    t, verdict, _ = replay("crashloop")
    assert t > first_two[1]


def test_oom_kills_are_reported_as_such_with_exit_code_137() -> None:
    _, verdict, _ = replay("oomkilled")
    assert verdict.failure is not None
    assert (verdict.failure.reason, verdict.failure.exit_code) == ("OOMKilled", 137)


def test_an_image_that_is_not_found_is_doomed_at_once() -> None:
    t, verdict, _ = replay("pullfail")
    assert verdict.failure is not None
    assert verdict.failure.reason in ("ErrImagePull", "ImagePullBackOff")
    assert "not found" in verdict.failure.message
    assert t == first_signal("pullfail")


def test_unschedulable_fails_only_after_its_window() -> None:
    _, verdict, _ = replay("unschedulable", until=8.0)
    assert verdict.failure is None and not verdict.done
    assert verdict.recheck_at is not None and verdict.recheck_at == pytest.approx(15.05, abs=0.1)
    _, verdict, _ = replay("unschedulable", Tuning(unschedulable_window=3.0), until=8.0)
    assert verdict.failure is not None and verdict.failure.reason == "Unschedulable"
    assert "Insufficient cpu" in verdict.failure.message


def test_a_pod_that_never_becomes_ready_fails_after_the_readiness_window() -> None:
    _, verdict, _ = replay("neverready", until=6.0)
    assert verdict.failure is None
    rec = recording("neverready")
    watched = Watched("web", "rec-web", rec["template"], 2, 1, readiness_window=2.0)
    judge = Judge(watched, Tuning())
    dep: Any = None
    pods: dict[str, Any] = {}
    verdict = Verdict()
    for e in rec["events"]:
        if e["kind"] == "Deployment":
            dep = e["object"]
        else:
            pods[e["object"]["metadata"]["name"]] = e["object"]
        verdict = judge.assess(dep, pods.values(), e["t"])
    verdict = judge.assess(dep, pods.values(), 6.0)
    assert verdict.failure is not None and verdict.failure.reason == "NotReady"


def test_exits_from_before_tracking_are_not_counted() -> None:
    # The same crash loop, but tracking starts at 5 s: the pods' earlier exits are forgiven.
    t, verdict, judge = replay("crashloop", baseline_at=5.0)
    assert verdict.failure is not None
    assert t > 7.0  # needed fresh exits after 5 s
    assert all(n <= 3 for n in judge.strikes.values())


def test_pods_of_another_template_are_ignored() -> None:
    rec = recording("crashloop")
    watched = Watched("web", "rec-web", "some-other-template", 2, 1)
    judge = Judge(watched, Tuning())
    dep: Any = None
    pods: dict[str, Any] = {}
    for e in rec["events"]:
        if e["kind"] == "Deployment":
            dep = e["object"]
        else:
            pods[e["object"]["metadata"]["name"]] = e["object"]
        assert judge.assess(dep, pods.values(), e["t"]).failure is None


# -- hand-made objects ------------------------------------------------------------------


def deployment(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "app-web", "generation": status.pop("generation", 2)},
        "spec": {"replicas": status.pop("desired", 2)},
        "status": status,
    }


def test_done_is_pinned_to_the_generation_shipway_applied() -> None:
    ready = {"updatedReplicas": 2, "replicas": 2, "availableReplicas": 2, "readyReplicas": 2}
    state, _, why = deployment_state(deployment(observedGeneration=1, **ready), 2)
    assert state == "waiting" and "controller" in why
    assert deployment_state(deployment(observedGeneration=2, **ready), 2)[0] == "done"
    # kubectl's other rules: old replicas left, updated not yet available
    state, _, why = deployment_state(
        deployment(observedGeneration=2, updatedReplicas=2, replicas=3, availableReplicas=3), 2
    )
    assert state == "waiting" and "old replicas" in why
    state, _, _ = deployment_state(
        deployment(observedGeneration=2, updatedReplicas=2, replicas=2, availableReplicas=1), 2
    )
    assert state == "waiting"


def test_progress_deadline_exceeded_is_doomed() -> None:
    dep = deployment(
        observedGeneration=2,
        conditions=[
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": 'ReplicaSet "app-web-1" has timed out progressing.',
            }
        ],
    )
    judge = Judge(Watched("web", "app-web", "t", 2, 2), Tuning())
    verdict = judge.assess(dep, [], 0.0)
    assert verdict.failure is not None and verdict.failure.reason == "ProgressDeadlineExceeded"


def test_replica_failure_fails_after_its_window() -> None:
    dep = deployment(
        observedGeneration=2,
        conditions=[
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreate",
                "message": 'pods "app-web-1-x" is forbidden: exceeded quota',
            }
        ],
    )
    judge = Judge(Watched("web", "app-web", "t", 2, 2), Tuning(replica_failure_window=10))
    first = judge.assess(dep, [], 100.0)
    assert first.failure is None and first.recheck_at == 110.0
    later = judge.assess(dep, [], 110.0)
    assert later.failure is not None and later.failure.reason == "FailedCreate"
    assert "exceeded quota" in later.failure.message


def replica_failure(since: str, generation: int = 2) -> dict[str, Any]:
    return deployment(
        generation=generation,
        observedGeneration=generation,
        conditions=[
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreate",
                "message": 'pods "app-web-1-x" is forbidden: exceeded quota',
                "lastTransitionTime": since,
            }
        ],
    )


def test_a_replica_failure_the_deployment_showed_before_the_apply_is_not_held_against_it() -> None:
    # an OLD ReplicaSet's failure, copied onto the Deployment before this apply, stays there
    before = replica_failure("2026-01-01T12:00:00Z", generation=1)
    judge = Judge(
        Watched("web", "app-web", "t", 2, 2), Tuning(replica_failure_window=10), before=before
    )
    same = replica_failure("2026-01-01T12:00:00Z")
    assert judge.assess(same, [], 100.0).failure is None
    assert judge.assess(same, [], 200.0).failure is None
    # one that arose after it is the new ReplicaSet's: it fails after its window
    later = replica_failure("2026-01-01T12:05:00Z")
    assert judge.assess(later, [], 300.0).failure is None
    verdict = judge.assess(later, [], 310.0)
    assert verdict.failure is not None and verdict.failure.reason == "FailedCreate"


def test_a_replica_failure_counts_when_the_deployment_showed_none_before() -> None:
    before = deployment(generation=1, observedGeneration=1)
    judge = Judge(
        Watched("web", "app-web", "t", 2, 2), Tuning(replica_failure_window=10), before=before
    )
    failure = replica_failure("2026-01-01T12:00:00Z")
    assert judge.assess(failure, [], 100.0).failure is None
    assert judge.assess(failure, [], 110.0).failure is not None


def pod(waiting: str, message: str, template: str = "t") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "app-web-1-a",
            "labels": {COMPONENT: "web"},
            "annotations": {TEMPLATE: template},
        },
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "web",
                    "restartCount": 0,
                    "ready": False,
                    "state": {"waiting": {"reason": waiting, "message": message}},
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("reason", "message", "doomed"),
    [
        ("InvalidImageName", 'couldn\'t parse image name "A:B"', True),
        ("ErrImageNeverPull", "image is not present with pull policy Never", True),
        ("CreateContainerConfigError", 'secret "app-env" not found', True),
        ("CreateContainerConfigError", "failed to sync configmap cache: timed out", False),
        ("ErrImagePull", "rpc error: i/o timeout", False),
        ("ImagePullBackOff", 'Back-off pulling image "x": manifest unknown', True),
        ("ContainerCreating", "", False),
    ],
)
def test_waiting_reasons(reason: str, message: str, doomed: bool) -> None:
    judge = Judge(Watched("web", "app-web", "t", 1, 2), Tuning())
    verdict = judge.assess(deployment(observedGeneration=2, desired=1), [pod(reason, message)], 0)
    assert (verdict.failure is not None) == doomed
    if doomed:
        assert verdict.failure is not None and verdict.failure.reason == reason


def test_transient_pull_errors_are_counted_not_doomed() -> None:
    judge = Judge(Watched("web", "app-web", "t", 1, 2), Tuning())
    dep = deployment(observedGeneration=2, desired=1)
    timeline = ["ErrImagePull", "ImagePullBackOff", "ErrImagePull"]
    verdicts = [
        judge.assess(dep, [pod(r, "i/o timeout")], float(i)) for i, r in enumerate(timeline)
    ]
    assert [v.failure is not None for v in verdicts] == [False, False, True]


def test_a_pull_error_then_a_crash_are_two_failures() -> None:
    # one pod, allowance 1: a transient pull error, then the container runs and exits once
    judge = Judge(Watched("web", "app-web", "t", 1, 2), Tuning())
    dep = deployment(observedGeneration=2, desired=1)
    pulling = pod("ErrImagePull", "i/o timeout")
    assert judge.assess(dep, [pulling], 0.0).failure is None
    crashed = copy.deepcopy(pod("CrashLoopBackOff", "back-off"))
    crashed["status"]["containerStatuses"][0]["restartCount"] = 1
    verdict = judge.assess(dep, [crashed], 1.0)
    assert verdict.failure is not None and verdict.failure.reason == "CrashLoopBackOff"
    assert "2 failures in 1 new pod (allowance 1)" in verdict.failure.message
    # seen again, the same exit is not counted twice
    assert sum(judge.strikes.values()) == 2
    judge.assess(dep, [crashed], 2.0)
    assert sum(judge.strikes.values()) == 2


def test_readiness_window_comes_from_the_probe() -> None:
    dep: dict[str, Any] = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "readinessProbe": {
                                "initialDelaySeconds": 3,
                                "periodSeconds": 1,
                                "failureThreshold": 20,
                                "timeoutSeconds": 2,
                            }
                        }
                    ]
                }
            }
        }
    }
    assert readiness_window(dep, Tuning(readiness_slack=10)) == 3 + 20 + 2 + 10
    no_probe: dict[str, Any] = {"spec": {"template": {"spec": {"containers": [{}]}}}}
    assert readiness_window(no_probe, Tuning(readiness_default=60)) == 60


def test_a_done_rollout_forgives_earlier_failures() -> None:
    judge = Judge(Watched("web", "app-web", "t", 1, 2), Tuning())
    crashed = copy.deepcopy(pod("CrashLoopBackOff", "back-off"))
    crashed["status"]["containerStatuses"][0]["restartCount"] = 1
    waiting = deployment(observedGeneration=2, desired=1, updatedReplicas=1, replicas=1)
    assert judge.assess(waiting, [crashed], 0).failure is None
    done = deployment(
        observedGeneration=2, desired=1, updatedReplicas=1, replicas=1, availableReplicas=1
    )
    assert judge.assess(done, [crashed], 1).done


def test_a_deployment_s_replica_sets_are_its_name_and_a_template_hash() -> None:
    assert is_replica_set_of("shop-web-7d4b9c8f5b", "shop-web")
    assert is_replica_set_of("shop-web-5f6c8d", "shop-web")
    assert is_replica_set_of("shop-web-1234567890", "shop-web")  # decimal hashes of old
    # another process whose name starts alike, and its ReplicaSets
    assert not is_replica_set_of("shop-web-worker", "shop-web")
    assert not is_replica_set_of("shop-web-worker-7d4b9c8f5b", "shop-web")
    # a generation's Deployment and its ReplicaSets
    assert not is_replica_set_of("shop-web-test1-20250101-120000", "shop-web")
    assert not is_replica_set_of("shop-web-test1-20250101-120000-7d4b9c8f5b", "shop-web")
    assert is_replica_set_of(
        "shop-web-test1-20250101-120000-7d4b9c8f5b", "shop-web-test1-20250101-120000"
    )
    assert not is_replica_set_of("shop-web", "shop-web")
    assert not is_replica_set_of("shop-web-", "shop-web")


def test_a_held_workloads_health_counts_crashes_even_while_it_is_done() -> None:
    """A replica-ratio canary held at its share (Judge.health): a pod that crashed and came
    back ready is still a crash; the second exit of one pod is over its allowance."""
    judge = Judge(Watched("web", "app-web", "t", 1, 2), Tuning())
    done = deployment(
        observedGeneration=2, desired=1, updatedReplicas=1, replicas=1, availableReplicas=1
    )
    running = copy.deepcopy(pod("", ""))
    cs = running["status"]["containerStatuses"][0]
    cs.update(ready=True, state={"running": {}})
    running["status"]["phase"] = "Running"
    assert judge.health(done, [running], 0) is None
    cs.update(restartCount=1, lastState={"terminated": {"exitCode": 3, "reason": "Error"}})
    assert judge.health(done, [running], 1) is None  # one crash a pod is allowed
    assert judge.assess(done, [running], 1).done  # a rollout would have forgiven it
    cs["restartCount"] = 2
    signal = judge.health(done, [running], 2)
    assert signal is not None and signal.reason == "CrashLoopBackOff" and signal.exit_code == 3
    failed = deployment(observedGeneration=2, desired=1, conditions=[
        {"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": "too slow"}
    ])  # fmt: skip
    stuck = Judge(Watched("web", "app-web", "t", 1, 2), Tuning()).health(failed, [], 0)
    assert stuck is not None and stuck.reason == "ProgressDeadlineExceeded"
