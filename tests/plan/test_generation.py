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
