"""A replica-ratio canary (plan/replica_canary.py, pure): the share in pods, the steps a
plan gets, and the decision of a held step (no counts: the pods' health and the time)."""

from __future__ import annotations

import json

import pytest

from shipway.plan.model import ApplyObject, HoldCanary, ShiftReplicas, step_from_json
from shipway.plan.replica_canary import held, replica_share, replica_steps
from shipway.release.artifact import Artifact, Unit
from shipway.spec.canary import Canary


@pytest.mark.parametrize(
    ("percent", "stable", "pods", "share"),
    [
        (10, 2, 1, 33.3),  # at least one pod: 10 % asked is a third of two stable pods
        (50, 2, 2, 50.0),
        (10, 1, 1, 50.0),
        (10, 9, 1, 10.0),
        (25, 3, 1, 25.0),
        (10, 14, 2, 12.5),  # 1.56 rounds to 2
        (90, 1, 9, 90.0),
        (50, 0, 1, 50.0),  # a stable scaled to 0 is counted as one
    ],
)
def test_the_share_is_the_nearest_whole_pod_and_never_none(
    percent: int, stable: int, pods: int, share: float
) -> None:
    got_pods, got_share = replica_share(percent, stable)
    assert got_pods == pods and round(got_share, 1) == share


def test_replica_steps_hold_each_share_and_say_it_is_by_pod_count() -> None:
    service = Unit(key="Deployment/shop-web", kind="Deployment", body={}, phase=1, switches=True)
    artifact = Artifact((service,))
    steps = [ApplyObject(unit=service.key, kind="Deployment", action="update")]
    rules = Canary(steps=(10, 50, 100), step_time=20.0, split="replicas", at_timeout="promote")
    out, notes = replica_steps(steps, artifact, rules, {"web": 2})
    assert [type(s).__name__ for s in out] == [
        "ShiftReplicas", "HoldCanary", "ShiftReplicas", "HoldCanary", "ApplyObject",
    ]  # fmt: skip
    first = out[0]
    assert isinstance(first, ShiftReplicas) and not first.sticky
    assert first.describe() == (
        "run the new release (the canary) beside the stable for about 10% of requests by pod "
        "count (web: 1 pod beside 2 (33%)); the Service splits per connection, not sticky"
    )
    hold = out[1]
    assert isinstance(hold, HoldCanary) and hold.seconds == 20.0 and hold.at_timeout == "promote"
    assert "inconclusive (no request counts), at_timeout = 'promote' decides" in hold.describe()
    assert "crash loop or a failing readiness probe aborts it" in hold.describe()
    for step in out[:2]:  # a saved plan applies exactly these steps
        assert step_from_json(json.loads(json.dumps(step.to_json()))) == step
    said = " ".join(notes)
    assert "replica-ratio canary" in said and "no stickiness" in said
    assert "no per-release request counts" in said and "held 20s" in said
    # a first deploy: nothing moves, no canary
    first_deploy = [ApplyObject(unit=service.key, kind="Deployment", action="create")]
    same, why = replica_steps(first_deploy, artifact, rules, {"web": 2})
    assert same == first_deploy and "no canary" in why[0]


def test_a_held_step_is_inconclusive_at_its_end_and_at_timeout_decides() -> None:
    assert held(10, 20.0, 5.0, None, "promote").verdict == "hold"
    # no counts: never a pass on its own — the spec's at_timeout, said, decides
    done = held(10, 20.0, 20.0, None, "promote")
    assert done.verdict == "promote" and "inconclusive" in done.why
    assert "no request counts" in done.why and "at_timeout = 'promote'" in done.why
    stopped = held(10, 20.0, 20.0, None, "abort")
    assert stopped.verdict == "abort" and "inconclusive" in stopped.why
    sick = held(10, 20.0, 1.0, "pod web-x: container web exited (Error)", "promote")
    assert sick.verdict == "abort" and "container web exited" in sick.why
    assert sick.line().startswith("canary 10%: 1.0s: abort (the canary's pods are failing")
