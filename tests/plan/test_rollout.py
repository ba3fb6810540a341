from __future__ import annotations

import pytest

from shipway.errors import InputError
from shipway.plan import (
    ApplyObject,
    NoOp,
    Observed,
    ObservedUnit,
    Remove,
    RunReleaseCommand,
    WaitRollout,
    rollout_steps,
)
from shipway.release.artifact import PREREQUISITE, ROUTING, WORKLOAD, Artifact, Unit


def unit(
    key: str,
    phase: int = WORKLOAD,
    *,
    waits: bool = False,
    switches: bool = False,
    process: str | None = None,
    v: int = 1,
) -> Unit:
    return Unit(
        key=key,
        kind=key.split("/")[0],
        body={"v": v},
        phase=phase,
        waits=waits,
        switches=switches,
        process=process,
    )


def seen(u: Unit, state: str = "running", digest: str | None = None) -> ObservedUnit:
    return ObservedUnit(
        key=u.key,
        kind=u.kind,
        digest=digest or u.digest,
        state=state,  # type: ignore[arg-type]
        process=u.process,
        phase=u.phase,
    )


def names(steps: list[object]) -> list[str]:
    return [s.describe() for s in steps]  # type: ignore[attr-defined]


SIDE_BY_SIDE = Artifact(
    (
        unit("route/app.localhost", ROUTING, switches=True, process="web"),
        unit("program/web@2", waits=True, process="web"),
        unit("snapshot/r2", PREREQUISITE),
    )
)


RELEASE_PHASE = "run the release command, before any new process starts: migrate"


def test_side_by_side_order_runs_the_release_command_before_any_new_process() -> None:
    old = unit("program/web@1", process="web")
    observed = Observed.of([seen(old), seen(unit("route/app.localhost", ROUTING, v=0))])
    steps = rollout_steps(SIDE_BY_SIDE, observed, release_command=("migrate",))
    assert [type(s).__name__ for s in steps] == [
        "ApplyObject",
        "RunReleaseCommand",
        "ApplyObject",
        "WaitRollout",
        "ApplyObject",
        "Remove",
    ]
    assert names(steps) == [
        "create snapshot/r2",
        RELEASE_PHASE,
        "create program/web@2",
        "wait until web is ready",
        "update route/app.localhost",
        "remove program/web@1 (no longer declared)",
    ]
    assert all(s.best_effort for s in steps if isinstance(s, Remove))


def test_in_place_order_runs_release_command_before_workloads_switch() -> None:
    desired = Artifact(
        (
            unit("Namespace/ns", PREREQUISITE),
            unit("Deployment/web", waits=True, switches=True, process="web"),
            unit("Deployment/worker", waits=True, switches=True, process="worker"),
        )
    )
    steps = rollout_steps(desired, Observed(), release_command=("migrate",))
    assert names(steps) == [
        "create Namespace/ns",
        RELEASE_PHASE,
        "create Deployment/web",
        "create Deployment/worker",
        "wait until web is ready",
        "wait until worker is ready",
    ]


def test_unchanged_units_are_left_alone_and_nothing_to_do_says_why() -> None:
    observed = Observed.of([seen(u) for u in SIDE_BY_SIDE])
    steps = rollout_steps(SIDE_BY_SIDE, observed, release_command=("migrate",))
    assert len(steps) == 1 and isinstance(steps[0], NoOp)
    assert "3 objects are up to date" in steps[0].describe()


def test_stopped_up_to_date_unit_is_started_not_recreated() -> None:
    u = unit("container/web", waits=True, process="web")
    steps = rollout_steps(Artifact((u,)), Observed.of([seen(u, state="created")]))
    assert isinstance(steps[0], ApplyObject) and steps[0].action == "start"
    assert isinstance(steps[1], WaitRollout)


def test_drifted_unit_is_updated() -> None:
    u = unit("container/web", process="web")
    steps = rollout_steps(Artifact((u,)), Observed.of([seen(u, digest="drifted")]))
    assert isinstance(steps[0], ApplyObject) and steps[0].action == "update"


def test_removals_go_routes_first_prerequisites_last() -> None:
    desired = Artifact((unit("program/new", process="web"),))
    observed = Observed.of(
        [
            seen(unit("snapshot/r1", PREREQUISITE)),
            seen(unit("route/h", ROUTING)),
            seen(unit("program/old")),
        ]
    )
    removed = [s.unit for s in rollout_steps(desired, observed) if isinstance(s, Remove)]
    assert removed == ["route/h", "program/old", "snapshot/r1"]


def test_an_empty_desired_set_is_refused() -> None:
    with pytest.raises(InputError, match="empty set"):
        rollout_steps(Artifact(()), Observed.of([seen(unit("x/y"))]))


def test_release_command_only_when_something_changes() -> None:
    observed = Observed.of([seen(u) for u in SIDE_BY_SIDE])
    steps = rollout_steps(SIDE_BY_SIDE, observed, release_command=("migrate",))
    assert not any(isinstance(s, RunReleaseCommand) for s in steps)


def on(host: str, key: str, **kw: object) -> Unit:
    u = unit(f"{key}@{host}", **kw)  # type: ignore[arg-type]
    return Unit(**{**u.__dict__, "host": host, "digest": ""})


def seen_on(u: Unit) -> ObservedUnit:
    return ObservedUnit(key=u.key, kind=u.kind, digest=u.digest, state="running",
                        process=u.process, host=u.host, phase=u.phase)  # fmt: skip


def four_hosts(v: int, files: bool = False) -> Artifact:
    units = []
    for h in ("h1", "h2", "h3", "h4"):
        if files:  # a prerequisite of the release command, on every host
            units.append(on(h, f"files/app.{v}", phase=PREREQUISITE))
        units.append(on(h, f"container/web.{v}", waits=True, process="web"))
        units.append(on(h, "route/web", phase=ROUTING, switches=True, process="web", v=v))
    return Artifact(tuple(units))


def test_a_batch_size_rolls_the_hosts_a_batch_at_a_time_release_command_once_first() -> None:
    observed = Observed.of([seen_on(u) for u in four_hosts(1, files=True)])
    steps = rollout_steps(
        four_hosts(2, files=True), observed, release_command=("migrate",), batch=2
    )
    hosts_of = [getattr(s, "host", None) for s in steps]
    # h1 and h2 roll whole (files, create, wait, switch, remove) before h3 and h4 begin
    first, second = hosts_of[: hosts_of.index("h3")], hosts_of[hosts_of.index("h3") :]
    assert set(first) == {"h1", "h2", None} and set(second) == {"h3", "h4"}
    # the release phase: after the first batch's prerequisites, before any new process
    units = [getattr(s, "unit", type(s).__name__) for s in steps]
    assert units[:3] == ["files/app.2@h1", "files/app.2@h2", "RunReleaseCommand"]
    assert units.count("RunReleaseCommand") == 1
    assert units.index("files/app.2@h3") > units.index("container/web.2@h2")
    removes = [s for s in steps if isinstance(s, Remove)]
    assert {r.host for r in removes[:2]} == {"h1", "h2"}
    assert steps.index(removes[1]) < hosts_of.index("h3")


def test_without_a_batch_or_with_one_as_large_as_the_hosts_every_host_rolls_at_once() -> None:
    observed = Observed.of([seen_on(u) for u in four_hosts(1)])
    whole = rollout_steps(four_hosts(2), observed)
    assert rollout_steps(four_hosts(2), observed, batch=4) == whole
    kinds = [type(s).__name__ for s in whole]
    assert kinds[:4] == ["ApplyObject"] * 4 and kinds[4:8] == ["WaitRollout"] * 4


def test_a_volume_is_never_removed_and_every_generation_keeps_it() -> None:
    from shipway.plan.model import Observed, ObservedUnit, Remove
    from shipway.plan.rollout import rollout_steps
    from shipway.release.artifact import Artifact, Unit

    wanted = Artifact((Unit(key="program/web@2", kind="program", body={"n": 2}),))
    observed = Observed.of(
        [
            ObservedUnit("program/web@1", "program", "x", phase=1),
            ObservedUnit("volume/data", "volume", "v", phase=0),
            ObservedUnit("PersistentVolumeClaim/shop-data", "PersistentVolumeClaim", "c", phase=0),
        ]
    )
    removed = [s.unit for s in rollout_steps(wanted, observed) if isinstance(s, Remove)]
    assert removed == ["program/web@1"]
    of_gen = Observed.of(
        [*observed.units.values(), ObservedUnit("gen/g1/x", "x", "d", generation="g1")]
    )
    assert sorted(of_gen.of_generation("g1").units) == [
        "PersistentVolumeClaim/shop-data",
        "gen/g1/x",
        "volume/data",
    ]


def test_prerequisites_that_wait_are_ready_before_the_release_command() -> None:
    """A waited-on prerequisite (a host's proxy) is ready before the release phase; every
    process of the release starts after it."""
    desired = Artifact(
        (
            unit("files/abc", PREREQUISITE),
            unit("proxy/a", PREREQUISITE, waits=True, process="proxy"),
            unit("container/web.1", waits=True, process="web"),
            unit("route/web", ROUTING, switches=True, process="web"),
        )
    )
    steps = rollout_steps(desired, Observed(), release_command=("migrate",))
    assert names(steps) == [
        "create files/abc",
        "create proxy/a",
        "wait until proxy is ready",
        RELEASE_PHASE,
        "create container/web.1",
        "wait until web is ready",
        "create route/web",
    ]


WEB_AND_WORKER = Artifact(
    (
        unit("snapshot/r2", PREREQUISITE),
        unit("program/web@2", waits=True, process="web"),
        unit("program/worker@2", waits=True, process="worker"),
        unit("route/app.localhost", ROUTING, switches=True, process="web", v=2),
    )
)


def test_a_route_waits_for_the_gate_of_its_own_process_only() -> None:
    """The web's route moves once the web passed its gate; the worker's gate (an uptime of
    a second) is waited for after the switch and before anything old is removed, so its
    failure still finds the old web running to switch back to."""
    old = [unit("program/web@1", process="web"), unit("program/worker@1", process="worker")]
    observed = Observed.of([*map(seen, old), seen(unit("route/app.localhost", ROUTING))])
    steps = rollout_steps(WEB_AND_WORKER, observed, release_command=("migrate",))
    assert names(steps) == [
        "create snapshot/r2",
        RELEASE_PHASE,
        "create program/web@2",
        "create program/worker@2",
        "wait until web is ready",
        "update route/app.localhost",
        "wait until worker is ready",
        "remove program/web@1 (no longer declared)",
        "remove program/worker@1 (no longer declared)",
    ]
    # the web's gate watches the worker: a worker already crashed stops the switch
    web, worker = (s for s in steps if isinstance(s, WaitRollout))
    assert (web.watch, worker.watch) == (("program/worker@2",), ())


def test_a_switching_unit_naming_no_process_waits_for_every_gate() -> None:
    """A switch that names no process may route to any of them: every gate first, as
    before."""
    desired = Artifact((*WEB_AND_WORKER.units[:3], unit("route/any", ROUTING, switches=True)))
    steps = names(rollout_steps(desired, Observed()))
    assert steps.index("wait until worker is ready") < steps.index("create route/any")
    assert steps.index("wait until web is ready") < steps.index("create route/any")


def test_a_route_on_a_host_waits_for_its_process_on_that_host() -> None:
    units = []
    for h in ("h1", "h2"):
        units.append(on(h, "container/web.2", waits=True, process="web"))
        units.append(on(h, "container/worker.2", waits=True, process="worker"))
    units.append(on("h1", "route/web", phase=ROUTING, switches=True, process="web"))
    steps = names(rollout_steps(Artifact(tuple(units)), Observed()))
    switch = steps.index("create route/web@h1 on h1")
    assert steps.index("wait until web is ready on h1") < switch
    # h2 has no route: its web gates after h1's switch, like every worker
    for late in ("web is ready on h2", "worker is ready on h1", "worker is ready on h2"):
        assert steps.index(f"wait until {late}") > switch
