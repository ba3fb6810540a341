from __future__ import annotations

import json

import pytest

from shipway.plan import (
    ApplyObject,
    Build,
    DropHost,
    NoOp,
    Observed,
    ObservedUnit,
    Plan,
    PointHost,
    Remove,
    RunReleaseCommand,
    Scale,
    WaitReplicas,
    WaitRollout,
    changes_between,
)
from shipway.plan.model import (
    STEP_TYPES,
    AnalyseCanary,
    HoldCanary,
    SetImage,
    ShiftReplicas,
    ShiftTraffic,
    StartAccessory,
    WaitImage,
)
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import Release, ReleaseStatus

ALL_STEPS = [
    ApplyObject(unit="Deployment/web", kind="Deployment", action="create", process="web"),
    RunReleaseCommand(command=("rake", "db:migrate")),
    WaitRollout(process="web", units=("Deployment/web",), watch=("Deployment/worker",)),
    Scale(process="web", replicas=0, generation="g1", delay=2.5),
    WaitReplicas(process="web", replicas=2, generation="g2"),
    PointHost(host="shop.example.com", process="web", generation="g2"),
    DropHost(host="shop.example.com", generation="g1"),
    Remove(unit="Service/old", kind="Service", reason="no longer declared"),
    NoOp(reason="nothing changed"),
    SetImage(workload="Deployment/web", container="app", image="reg/web:2", was="reg/web:1"),
    WaitImage(workload="Deployment/web", container="app", image="reg/web:2"),
    Build(
        kind="image",
        what="reg/shop:src-0123456789abcdef",
        inputs="sha256:0123456789abcdef" + "0" * 48,
        source="Dockerfile (12 files)",
    ),
    StartAccessory(
        accessory="db",
        kind="postgres",
        version="15",
        action="create",
        declaration='{"kind": "postgres", "version": "15"}',
    ),
    ShiftTraffic(percent=10),
    AnalyseCanary(percent=10, rules='{"steps": [10, 100]}'),
    ShiftReplicas(percent=10, sticky=False, pods="web: 1 pod beside 2 (33%)"),
    HoldCanary(percent=10, rules='{"steps": [10, 100]}', seconds=30.0),
]


def plan() -> Plan:
    release = Release(
        app="shop",
        slot="prod",
        revision=3,
        status=ReleaseStatus.PENDING,
        image="reg/shop:2",
        artifact=Artifact(
            (Unit(key="Deployment/web", kind="Deployment", body={"replicas": 2}, process="web"),)
        ),
    )
    observed = Observed.of(
        [ObservedUnit(key="Deployment/web", kind="Deployment", digest="x")], head="r2:deployed"
    )
    return Plan(
        app="shop",
        slot="prod",
        backend="kubernetes",
        operation="deploy",
        steps=tuple(ALL_STEPS),
        observed=observed.summary(),
        release=release,
    )


def test_every_step_type_is_covered_here() -> None:
    assert {type(s).name for s in ALL_STEPS} == set(STEP_TYPES)


def test_plan_round_trips_through_json() -> None:
    p = plan()
    again = Plan.from_json(json.loads(json.dumps(p.to_json())))
    assert again == p
    assert again.fingerprint == p.fingerprint


def test_describe_gives_the_dry_run_lines() -> None:
    lines = plan().describe()
    assert lines[0] == "deploy shop to slot prod (kubernetes): release r3, image reg/shop:2"
    assert lines[1] == "  1. create Deployment/web"
    assert "  2. run the release command, before any new process starts: rake db:migrate" in lines
    assert "  4. put to sleep: web generation g1 after 2.5s" in lines
    assert (
        "  12. build image reg/shop:src-0123456789abcdef from Dockerfile (12 files) "
        "(inputs 0123456789ab)" in lines
    )
    assert lines[-1].startswith("  (made from observed state ")
    assert len(lines) == len(ALL_STEPS) + 2


def test_a_tampered_plan_is_refused() -> None:
    data = plan().to_json()
    data["observed"]["Deployment/web"] = "other:running"
    with pytest.raises(ValueError, match="fingerprint"):
        Plan.from_json(data)


def test_fingerprint_follows_the_observed_state_and_records() -> None:
    u = ObservedUnit(key="k", kind="K", digest="d1")
    a = Observed.of([u], head="r1:deployed")
    assert a.fingerprint() == Observed.of([u], head="r1:deployed").fingerprint()
    assert a.fingerprint() != Observed.of([u], head="r2:pending").fingerprint()
    changed = Observed.of([ObservedUnit(key="k", kind="K", digest="d2")], head="r1:deployed")
    assert a.fingerprint() != changed.fingerprint()
    assert changes_between(a.summary(), changed.summary()) == [
        "k changed: d1:present -> d2:present"
    ]
    assert changes_between(a.summary(), Observed(head="r1:deployed").summary()) == [
        "k disappeared (was d1:present)"
    ]


def test_a_plan_whose_release_names_another_slot_is_refused() -> None:
    data = plan().to_json()
    data["release"]["slot"] = "other"
    with pytest.raises(ValueError, match="records a release of shop/other"):
        Plan.from_json(data)


def test_a_build_that_was_made_before_says_reuse() -> None:
    step = Build(kind="environment", what="envs/abc", inputs="sha256:ab12", source="x", reuse=True)
    assert step.describe() == "reuse environment envs/abc (already built from inputs ab12)"
