from __future__ import annotations

from shipway.plan import (
    DropHost,
    NoOp,
    PointHost,
    Scale,
    WaitReplicas,
    switch_steps,
)


def test_switch_order_scale_wait_point_drop_sleep() -> None:
    steps = switch_steps(
        to_generation="g2",
        from_generation="g1",
        replicas={"web": 2, "worker": 1},
        hosts=[("shop.example.com", "web")],
        sleep_delay=5,
    )
    kinds = [type(s).__name__ for s in steps]
    assert kinds == [
        "Scale",
        "Scale",
        "WaitReplicas",
        "WaitReplicas",
        "PointHost",
        "DropHost",
        "Scale",
        "Scale",
    ]
    first_point = kinds.index("PointHost")
    assert all(kinds.index(k) < first_point for k in ("Scale", "WaitReplicas"))
    assert isinstance(steps[4], PointHost) and steps[4].generation == "g2"
    assert isinstance(steps[5], DropHost) and steps[5].generation == "g1" and steps[5].best_effort
    sleeps = [s for s in steps[6:] if isinstance(s, Scale)]
    assert {(s.generation, s.replicas, s.delay) for s in sleeps} == {("g1", 0, 5)}
    assert all(isinstance(s, WaitReplicas) for s in steps[2:4])


def test_switch_to_the_live_generation_is_a_no_op_saying_why() -> None:
    steps = switch_steps(to_generation="g1", from_generation="g1", replicas={"web": 1}, hosts=[])
    assert len(steps) == 1 and isinstance(steps[0], NoOp)
    assert "already live" in steps[0].describe()


def test_first_generation_says_there_is_nothing_to_drop() -> None:
    steps = switch_steps(
        to_generation="g1", from_generation=None, replicas={"web": 1}, hosts=[("h", "web")]
    )
    assert isinstance(steps[-1], NoOp) and "nothing to drop" in steps[-1].reason
    assert not any(isinstance(s, DropHost) for s in steps)


def test_a_new_generation_runs_its_release_command_before_any_of_its_processes() -> None:
    """The release phase of a blue-green deploy: the generation's prerequisites, then the
    release command, then its processes (applying one may start it), scale, wait, point."""
    from shipway.plan.model import ApplyObject, Observed, RunReleaseCommand
    from shipway.release.artifact import PREREQUISITE, WORKLOAD, Artifact, Unit
    from shipway.release.model import Release, ReleaseStatus

    artifact = Artifact(
        (
            Unit("gen/g2/program/web@d", "program", {"v": 1}, WORKLOAD, "web", None, "g2", True),
            Unit("gen/g2/snapshot", "snapshot", {"v": 1}, PREREQUISITE, None, None, "g2"),
        )
    )
    release = Release(
        app="shop", slot="prod", revision=2, status=ReleaseStatus.PENDING, artifact=artifact
    )
    steps = switch_steps(
        to_generation="g2",
        from_generation="g1",
        replicas={"web": 1},
        hosts=[("shop.example.com", "web")],
        release=release,
        observed=Observed(),
        release_command=("migrate",),
    )
    order = [
        s.unit if isinstance(s, ApplyObject) else type(s).__name__
        for s in steps[: [type(s) for s in steps].index(PointHost) + 1]
    ]
    assert order == [
        "gen/g2/snapshot",
        "RunReleaseCommand",
        "gen/g2/program/web@d",
        "Scale",
        "WaitReplicas",
        "PointHost",
    ]
    assert sum(isinstance(s, RunReleaseCommand) for s in steps) == 1
