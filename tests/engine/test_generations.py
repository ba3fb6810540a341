"""Blue/green generations, sequenced by the engine against the in-memory backend."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from shipway.backends.memory import MemoryBackend
from shipway.backends.protocol import HostOwner
from shipway.engine import Engine, NoAnchor, Rolled, RolledBack
from shipway.engine.request import DeployRequest
from shipway.errors import HostTaken, InputError, Interrupted
from shipway.guard import Guard
from shipway.release.model import ReleaseStatus
from shipway.spec import App
from tests.conftest import app_from_toml
from tests.engine.test_sequencing import Lines

SPEC = """
[app]
name = "shop"
image = "reg/shop:1"
release_command = "migrate"
[processes.web]
command = "serve"
port = 8000
replicas = 2
[processes.worker]
command = "work"
[slots.prod]
strategy = "blue-green"
sleep_after = 0
routes = [{ host = "shop.example.com", process = "web" }]
"""


@pytest.fixture
def app() -> App:  # a blue-green slot (backend and out: tests/engine/conftest.py)
    return app_from_toml(SPEC)


def engine(backend: MemoryBackend, out: Lines) -> Engine:
    return Engine(backend, out, environ={})


def deploy(app: App, backend: MemoryBackend, out: Lines, **kw: Any) -> Any:
    clearance = Guard(app.slots).clear("prod")
    return engine(backend, out).deploy(clearance, app, "prod", DeployRequest(**kw))


def calls(backend: MemoryBackend, *names: str) -> list[str]:
    return [f"{n} {d}".strip() for n, d in backend.calls if n in names]


def gens(backend: MemoryBackend) -> dict[str, str]:
    target = app_from_toml(SPEC).slots.target("prod")
    return {g.name: g.state for g in backend.generations(target)}


def test_each_deploy_is_a_new_generation_switched_in_order(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    first = deploy(app, backend, out)
    assert isinstance(first, Rolled)
    g1 = backend.records[1].generation
    assert g1 and g1.startswith("prod-")
    backend.calls.clear()
    second = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(second, Rolled) and (second.from_revision, second.to_revision) == (1, 2)
    g2 = backend.records[2].generation
    assert g2 and g2 != g1
    assert calls(backend, "scale", "wait_replicas", "run_release_command", "point_host",
                 "drop_host") == [
        "run_release_command migrate",
        f"scale {g2}/web=2", f"scale {g2}/worker=1",
        f"wait_replicas {g2}/web", f"wait_replicas {g2}/worker",
        f"point_host shop.example.com->{g2}",
        f"drop_host shop.example.com-x-{g1}",
        f"scale {g1}/web=0", f"scale {g1}/worker=0",
    ]  # fmt: skip
    applied = calls(backend, "apply")
    assert applied and all(f"gen/{g2}/" in a for a in applied)
    # the release phase: after the generation's config, before any of its workloads
    phase = calls(backend, "apply", "run_release_command")
    assert phase == [
        f"apply create gen/{g2}/config/shop",
        "run_release_command migrate",
        f"apply create gen/{g2}/workload/web",
        f"apply create gen/{g2}/workload/worker",
    ]
    assert gens(backend) == {g1: "asleep", g2: "live"}
    assert backend.records[1].status == ReleaseStatus.SUPERSEDED


def test_a_failing_release_command_starts_nothing_of_the_new_generation(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    g1 = backend.records[1].generation
    backend.failing_release_command = True
    backend.calls.clear()
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, RolledBack) and outcome.exit_code == 10
    assert outcome.failure.reason == "ReleaseCommandFailed"
    g2 = backend.records[2].generation
    # only the generation's config was applied; no workload of it, no scale, no host moved
    assert calls(backend, "apply") == [f"apply create gen/{g2}/config/shop"]
    assert not [c for c in calls(backend, "scale") if f"{g2}/" in c and not c.endswith("=0")]
    assert calls(backend, "point_host", "drop_host") == []
    assert backend.routes["shop.example.com"] == g1
    assert gens(backend)[g1] == "live"


def test_a_failing_route_drop_is_reported_with_its_fix_and_is_not_fatal(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    backend.undroppable_hosts.add("shop.example.com")
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, Rolled) and outcome.exit_code == 0
    assert len(outcome.warnings) == 1
    assert "to fix by hand: delete the route for shop.example.com" in outcome.warnings[0]
    g1, g2 = backend.records[1].generation, backend.records[2].generation
    assert backend.routes["shop.example.com"] == g2
    assert f"scale {g1}/web=0" in calls(backend, "scale")  # the walk went on


def test_a_generation_that_never_gets_ready_leaves_routes_untouched(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    g1 = backend.records[1].generation
    backend.calls.clear()
    backend.on_call["scale"] = lambda: backend.doomed_generations.update(
        g for g in backend.generation_created if g != g1
    )
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, RolledBack) and outcome.exit_code == 10
    assert calls(backend, "point_host", "drop_host") == []
    assert calls(backend, "run_release_command") == ["run_release_command migrate"]  # ran first
    assert backend.routes["shop.example.com"] == g1
    g2 = backend.records[2].generation
    assert backend.records[2].status == ReleaseStatus.FAILED
    scales = calls(backend, "scale")
    assert scales[:1] == [f"scale {g2}/web=2"]
    assert f"scale {g2}/web=0" in scales  # put back to sleep
    assert not any(s.startswith(f"scale {g1}/") for s in scales)  # live one untouched


def test_first_generation_failing_is_no_anchor(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    backend.on_call["scale"] = lambda: backend.doomed_generations.update(backend.generation_created)
    outcome = deploy(app, backend, out)
    assert isinstance(outcome, NoAnchor)
    assert "shop.example.com" not in backend.routes


def test_switch_back_to_an_asleep_generation(app: App, backend: MemoryBackend, out: Lines) -> None:
    deploy(app, backend, out)
    deploy(app, backend, out, image="reg/shop:2")
    g1, g2 = backend.records[1].generation, backend.records[2].generation
    assert g1 is not None
    backend.calls.clear()
    outcome = engine(backend, out).switch_to(Guard(app.slots).clear("prod"), app, "prod", g1)
    assert isinstance(outcome, Rolled) and outcome.to_revision == 3
    assert calls(backend, "apply") == []  # nothing re-created: it was kept asleep
    assert calls(backend, "scale", "wait_replicas", "point_host", "drop_host")[:5] == [
        f"scale {g1}/web=2", f"scale {g1}/worker=1",
        f"wait_replicas {g1}/web", f"wait_replicas {g1}/worker",
        f"point_host shop.example.com->{g1}",
    ]  # fmt: skip
    assert gens(backend) == {g1: "live", g2: "asleep"}
    r3 = backend.records[3]
    assert r3.generation == g1 and r3.status == ReleaseStatus.DEPLOYED
    assert r3.description == f"switch to {g1} (r1); {g2} goes to sleep"


def test_rollback_on_a_blue_green_slot_switches_generations(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    deploy(app, backend, out, image="reg/shop:2")
    outcome = engine(backend, out).rollback(Guard(app.slots).clear("prod"), app, "prod")
    assert isinstance(outcome, Rolled)
    assert backend.routes["shop.example.com"] == backend.records[1].generation


def test_switch_to_the_live_generation_is_a_no_op_saying_why(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    g1 = backend.records[1].generation
    assert g1 is not None
    backend.calls.clear()
    out.lines.clear()
    engine(backend, out).switch_to(Guard(app.slots).clear("prod"), app, "prod", g1)
    assert f"[1/1] nothing to do: generation {g1} is already live" in out.lines
    assert calls(backend, "apply", "scale", "point_host", "drop_host") == []


def test_a_host_served_by_another_app_is_refused_unless_taken(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    backend.foreign_hosts["shop.example.com"] = HostOwner("blog", "prod", "prod-1", "ns blog")
    with pytest.raises(HostTaken) as err:
        deploy(app, backend, out)
    assert err.value.exit_code == 2
    assert "blog/prod generation prod-1 (ns blog)" in str(err.value)
    assert "--take-host" in str(err.value)
    assert [c for c in backend.mutations() if c[0] != "lock"] == []
    outcome = deploy(app, backend, out, take_host=True)
    assert isinstance(outcome, Rolled)
    assert any("taking host shop.example.com from blog/prod" in line for line in out.lines)


def test_sleep_wake_and_gc_never_touch_the_live_generation(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    for image in ("reg/shop:1", "reg/shop:2", "reg/shop:3"):
        deploy(app, backend, out, image=image)
    g1, g2, g3 = (backend.records[n].generation for n in (1, 2, 3))
    assert g1 and g2 and g3
    e, c = engine(backend, out), Guard(app.slots).clear("prod")
    with pytest.raises(InputError, match="is live"):
        e.sleep(c, app, "prod", g3)
    backend.calls.clear()
    e.wake(c, app, "prod", g1)
    assert calls(backend, "scale", "wait_replicas") == [
        f"scale {g1}/web=2", f"scale {g1}/worker=1",
        f"wait_replicas {g1}/web", f"wait_replicas {g1}/worker",
    ]  # fmt: skip
    backend.calls.clear()
    e.sleep(c, app, "prod", g1)
    assert calls(backend, "scale") == [f"scale {g1}/web=0", f"scale {g1}/worker=0"]
    deleted = e.gc(c, app, "prod", keep=1)
    assert deleted == [g1]
    assert gens(backend) == {g2: "asleep", g3: "live"}
    assert e.gc(c, app, "prod", keep=0) == [g2]
    assert gens(backend) == {g3: "live"}


def test_gc_goes_by_the_backend_s_oldest_first_order_when_its_clock_ties(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    """A clock with a one-second grain stamps generations made in one second alike."""
    for image in ("reg/shop:1", "reg/shop:2", "reg/shop:3"):
        deploy(app, backend, out, image=image)
    g1, g2, g3 = (backend.records[n].generation for n in (1, 2, 3))
    for name in backend.generation_created:
        backend.generation_created[name] = "2026-11-30T00:00:00Z"
    e, c = engine(backend, out), Guard(app.slots).clear("prod")
    assert e.gc(c, app, "prod", keep=1) == [g1]
    assert gens(backend) == {g2: "asleep", g3: "live"}


def test_restart_in_a_blue_green_slot_stays_inside_the_live_generation(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    deploy(app, backend, out, image="reg/shop:2")
    g1, g2 = backend.records[1].generation, backend.records[2].generation
    backend.calls.clear()
    outcome = engine(backend, out).restart(Guard(app.slots).clear("prod"), app, "prod", "web")
    assert isinstance(outcome, Rolled)
    assert calls(backend, "apply") == [f"apply update gen/{g2}/workload/web"]
    assert calls(backend, "remove") == []  # the asleep generation is not pruned
    assert any(k.startswith(f"gen/{g1}/") for k in backend.live)


class _RollingOnly:
    """A backend without generations: every attribute of the memory backend but those."""

    def __init__(self, inner: MemoryBackend) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("hosts", "generations", "host_owner", "delete_generation"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_a_backend_without_generations_is_refused_before_anything_is_touched(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    rolling_only: Any = _RollingOnly(backend)
    with pytest.raises(InputError, match="does not keep generations") as err:
        Engine(rolling_only, out, environ={}).deploy(Guard(app.slots).clear("prod"), app, "prod")
    assert err.value.exit_code == 2
    assert backend.mutations() == []  # not even the lock (which may create state)


TWO_HOSTS = SPEC.replace(
    'routes = [{ host = "shop.example.com", process = "web" }]',
    'routes = [{ host = "shop.example.com", process = "web" }, '
    '{ host = "www.shop.example.com", process = "web" }]',
)


def test_a_host_that_cannot_be_pointed_sends_the_pointed_ones_back_before_any_sleep(
    backend: MemoryBackend, out: Lines
) -> None:
    app = app_from_toml(TWO_HOSTS)
    deploy(app, backend, out)
    g1 = backend.records[1].generation
    backend.unpointable_hosts.add("www.shop.example.com")
    backend.calls.clear()
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, RolledBack) and outcome.exit_code == 10
    g2 = backend.records[2].generation
    assert backend.routes == {"shop.example.com": g1, "www.shop.example.com": g1}
    moves = calls(backend, "point_host", "drop_host", "scale")
    back = moves.index(f"point_host shop.example.com->{g1}")
    assert moves.index(f"drop_host shop.example.com-x-{g2}") > back
    assert moves.index(f"scale {g2}/web=0") > back  # never stopped under its traffic
    assert not any(m.startswith(f"scale {g1}/") and m.endswith("=0") for m in moves)


def test_a_failure_while_applying_puts_what_was_already_started_back_to_sleep(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    g1 = backend.records[1].generation
    applied: list[int] = []

    def break_at_the_third_apply() -> None:
        applied.append(1)
        if len(applied) == 3:
            backend.broken = True

    backend.on_call["apply"] = break_at_the_third_apply
    backend.calls.clear()
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, RolledBack)
    g2 = backend.records[2].generation
    # web was applied, worker's apply failed half-way: both go (back) to sleep
    assert calls(backend, "scale") == [f"scale {g2}/web=0", f"scale {g2}/worker=0"]
    assert backend.routes["shop.example.com"] == g1


def test_a_signal_landing_after_a_host_moved_sends_it_back_before_any_sleep(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    """The point step is under way (not done) when the signal lands, yet its host moved."""
    deploy(app, backend, out)
    g1 = backend.records[1].generation

    def moved_then_signalled() -> None:
        g2 = next(g for g in backend.generation_created if g != g1)
        backend.routes["shop.example.com"] = g2
        backend.on_call.pop("point_host")
        raise Interrupted(signal.SIGTERM)

    backend.on_call["point_host"] = moved_then_signalled
    backend.calls.clear()
    with pytest.raises(Interrupted):
        deploy(app, backend, out, image="reg/shop:2")
    g2 = backend.records[2].generation
    assert backend.routes["shop.example.com"] == g1
    moves = calls(backend, "point_host", "drop_host", "scale")
    back = moves.index(f"point_host shop.example.com->{g1}")
    assert moves.index(f"scale {g2}/web=0") > back  # never stopped under its traffic
    assert backend.records[2].status == ReleaseStatus.FAILED
