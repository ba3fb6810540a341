"""Doomed rollouts on the real control plane: fail fast, roll back, say what happened."""

from __future__ import annotations

import time

import pytest
from lightkube.models.core_v1 import ObjectReference, ResourceQuotaSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, ResourceQuota

from shipway.backends.kubernetes.rollout import Counts, Signal, Verdict, Watched
from shipway.engine.outcome import RollbackFailed, Rolled, RolledBack
from tests.backends.kubernetes.conftest import TOKEN, Slot

pytestmark = pytest.mark.k8s


def test_a_crash_looping_image_is_rolled_back_and_the_anchor_serves_again(slot: Slot) -> None:
    app = slot.write()
    assert slot.cli("deploy", "test1").returncode == 0
    anchor_rs = {name for name, rs in slot.replicasets("shop-web").items() if rs.spec.replicas}

    started = time.monotonic()
    result = slot.cli("deploy", "test1", "--image", "registry.example/shop:crashloop")
    took = time.monotonic() - started
    out = result.stdout + result.stderr
    assert result.returncode == 10, out
    assert "rolled back shop/test1: r2 failed" in out and "r1 is serving again" in out
    assert "CrashLoopBackOff" in out and "(exit code 1)" in out
    assert "event Warning BackOff" in out  # the kubelet's events about the failing pod
    assert "log: none available" in out  # the simulated kubelet keeps no logs: said plainly
    assert TOKEN not in out
    assert took < 60, f"the failure took {took:.0f}s to report"

    # The anchor serves again: r1's template, its ReplicaSet, all replicas available
    assert slot.images() == {
        "shop-web": "registry.example/shop:1",
        "shop-worker": "registry.example/shop:1",
    }
    web = slot.deployment("shop-web")
    assert web.status.availableReplicas == web.status.updatedReplicas == 2
    serving = {name for name, rs in slot.replicasets("shop-web").items() if rs.spec.replicas}
    assert serving == anchor_rs
    assert slot.statuses(app) == {1: "deployed", 2: "failed"}


def test_an_image_that_cannot_be_pulled_is_rolled_back_at_once(slot: Slot) -> None:
    app = slot.write()
    slot.deploy(app)
    started = time.monotonic()
    outcome, lines = slot.deploy(app, image="registry.example/shop:pullfail")
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason in ("ErrImagePull", "ImagePullBackOff")
    assert "not found" in outcome.failure.message
    assert time.monotonic() - started < 30
    assert slot.images()["shop-web"] == "registry.example/shop:1"


def test_an_unschedulable_pod_fails_after_its_window(slot: Slot) -> None:
    app = slot.write()
    slot.deploy(app)
    greedy = slot.append('[processes.web.resources]\nrequests = { cpu = "64" }\n')
    started = time.monotonic()
    outcome, lines = slot.deploy(greedy, tuning={"unschedulable_window": 3.0})
    took = time.monotonic() - started
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason == "Unschedulable"
    assert "Insufficient cpu" in outcome.failure.message
    # the scheduler records FailedScheduling once per attempt: said once, counted
    scheduling = [d for d in outcome.failure.details if "FailedScheduling" in d]
    assert len(scheduling) == 1, outcome.failure.details
    assert 3.0 <= took < 40


def test_the_same_event_recorded_twice_is_one_line_with_its_count(slot: Slot) -> None:
    app = slot.write()
    said = "0/2 nodes are available: 2 Insufficient cpu."
    for n, count in enumerate([3, None]):  # one aggregated event, one more of the same
        slot.client.create(
            Event(
                metadata=ObjectMeta(name=f"sched{n}", namespace=slot.namespace),
                involvedObject=ObjectReference(
                    kind="Pod", name="shop-web-5d9c-x1", namespace=slot.namespace
                ),
                reason="FailedScheduling",
                message=said,
                type="Warning",
                count=count,
            )
        )
    details = slot.backend(app)._events({"involvedObject.name": "shop-web-5d9c-x1"})
    assert details == [f"event Warning FailedScheduling (Pod shop-web-5d9c-x1, x4): {said}"]


def test_a_failed_rollback_says_the_slot_may_be_down(slot: Slot) -> None:
    """The anchor cannot come back: a quota added since it was deployed refuses pods
    without a memory limit, and rolling back needs a new pod of the anchor's template — the
    worker's: it serves no traffic, so it keeps the cluster's default strategy, which takes
    one of its 4 old pods away at once (web keeps its old pods: maxUnavailable 0)."""
    app = slot.write()
    app = slot.edit('command = "work"', 'command = "work"\nreplicas = 4')
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    slot.client.create(
        ResourceQuota(
            metadata=ObjectMeta(name="memory-limits"),
            spec=ResourceQuotaSpec(hard={"limits.memory": "64Gi"}),
        ),
        namespace=slot.namespace,
    )
    limited = slot.append(
        '[processes.web.resources]\nlimits = { memory = "256Mi" }\n'
        '[processes.worker.resources]\nlimits = { memory = "256Mi" }\n'
    )
    outcome, lines = slot.deploy(
        limited,
        image="registry.example/shop:crashloop",
        tuning={"replica_failure_window": 2.0},
        rollback_timeout=60,
    )
    assert isinstance(outcome, RollbackFailed), lines.text
    assert outcome.exit_code == 11
    assert outcome.failure.reason == "CrashLoopBackOff"
    assert outcome.rollback_failure.reason == "FailedCreate"
    assert "quota" in outcome.rollback_failure.message
    assert "MAY BE DOWN" in outcome.line()
    assert slot.statuses(limited) == {1: "deployed", 2: "failed"}


def test_a_rollout_that_is_not_done_in_time_times_out_with_its_state(slot: Slot) -> None:
    app = slot.write()
    slot.deploy(app)
    outcome, lines = slot.deploy(app, image="registry.example/shop:neverready", timeout=4)
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason == "Timeout"
    assert outcome.failure.message.startswith("not ready after 4s: shop-web: desired 2")
    assert any("(Pod shop-web-" in d for d in outcome.failure.details)
    assert slot.images()["shop-web"] == "registry.example/shop:1"


def test_a_deployment_s_failure_details_hold_the_events_of_its_own_replica_sets_only(
    slot: Slot,
) -> None:
    app = slot.write()
    for n, replica_set in enumerate(
        ["shop-web-7d4b9c8f5b", "shop-web-worker-5f6c8d9b7", "shop-web-test1-20250101-120000-6b8f"]
    ):
        slot.client.create(
            Event(
                metadata=ObjectMeta(name=f"e{n}", namespace=slot.namespace),
                involvedObject=ObjectReference(
                    kind="ReplicaSet", name=replica_set, namespace=slot.namespace
                ),
                reason="FailedCreate",
                message=f"about {replica_set}",
                type="Warning",
            )
        )
    details = slot.backend(app)._events_of_deployment("shop-web")
    assert [d for d in details if "FailedCreate" in d] == [
        "event Warning FailedCreate (ReplicaSet shop-web-7d4b9c8f5b): about shop-web-7d4b9c8f5b"
    ]


def test_failure_details_mask_the_live_secret_values_when_nothing_was_applied(
    slot: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wake or a switch applies nothing, so the backend was given no secret values; the
    # env Secret in the namespace has them, and whatever the pods print may contain them.
    # (The simulated kubelet keeps no logs: the failure's own helpers are called with
    # texts that carry the value.)
    app = slot.write()
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    monkeypatch.delenv("SHOP_TOKEN")  # and this machine cannot resolve the spec's secret
    app = slot.app()
    backend = slot.backend(app)
    watched = [Watched("web", "shop-web", "t", 2)]
    leaked = f"connecting with {TOKEN} failed"

    failure = backend._failure("web", Signal("CrashLoopBackOff", leaked, None), watched)
    assert TOKEN not in failure.message and "connecting with" in failure.message
    job = backend._job_failure("shop-release-r9", {"reason": "Failed", "message": leaked})
    assert TOKEN not in job.message and "connecting with" in job.message
    verdict = Verdict(counts=Counts(desired=2), note=leaked)
    timeout = backend._timeout("web", [verdict], watched, 5.0, [])
    assert TOKEN not in timeout.message and "connecting with" in timeout.message
