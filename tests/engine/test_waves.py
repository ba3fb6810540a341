"""The walker's waves (pure): which consecutive steps a fanning-out backend gets at once."""

from __future__ import annotations

from shipway.engine.walk import waves
from shipway.plan.model import ApplyObject, RunReleaseCommand, Step, WaitRollout


def create(host: str | None, kind: str = "container") -> ApplyObject:
    return ApplyObject(unit=f"{kind}/web@{host}", kind=kind, action="create", host=host)


def wait(host: str) -> WaitRollout:
    return WaitRollout(process="web", units=(f"container/web@{host}",), host=host)


def test_one_kind_of_step_on_different_hosts_is_one_wave_in_plan_order() -> None:
    steps: list[Step] = [create("a"), create("b"), wait("a"), wait("b")]
    steps += [RunReleaseCommand(command=("migrate",)), create("a", "route"), create("b", "route")]
    got = [[getattr(s, "host", None) for s in w] for w in waves(steps, 8)]
    assert got == [["a", "b"], ["a", "b"], [None], ["a", "b"]]


def test_a_second_step_on_the_same_host_starts_a_new_wave_and_width_bounds_a_wave() -> None:
    steps: list[Step] = [create("a"), create("a", "files"), create("a"), create("b"), create("c")]
    assert [len(w) for w in waves(steps, 8)] == [1, 1, 3]
    assert [len(w) for w in waves(steps, 2)] == [1, 1, 2, 1]
    assert [len(w) for w in waves(steps, 1)] == [1, 1, 1, 1, 1]
    assert [len(w) for w in waves([create(None), create(None)], 8)] == [1, 1]
