"""The generation plan walker (blue/green), sequenced against the in-memory backend."""

from __future__ import annotations

import pytest

from shipway.backends.memory import MemoryBackend
from shipway.engine import Engine, Rolled, RolledBack
from shipway.guard import Guard
from shipway.plan import Observed, Plan, switch_plan, switch_steps
from shipway.release import history
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import Release, ReleaseStatus
from shipway.spec import App
from tests.conftest import app_from_toml
from tests.engine.test_sequencing import Lines

SPEC = """
[app]
name = "shop"
image = "reg/shop:1"
[processes.web]
command = "serve"
port = 8000
[slots.prod]
strategy = "blue-green"
routes = [{ host = "shop.example.com", process = "web" }]
"""


@pytest.fixture
def app() -> App:
    return app_from_toml(SPEC)


def switch(app: App, backend: MemoryBackend, out: Lines, to: str, live: str | None) -> object:
    def build(records: list[Release], observed: Observed) -> Plan:
        anchor = history.deployed(records)
        release = Release(
            app="shop",
            slot="prod",
            revision=history.next_revision(records),
            status=ReleaseStatus.PENDING,
            generation=to,
            artifact=anchor.artifact if anchor else replace_artifact(),
        )
        steps = switch_steps(
            to_generation=to,
            from_generation=live,
            replicas={"web": 2},
            hosts=[("shop.example.com", "web")],
        )
        return switch_plan(
            app="shop",
            slot="prod",
            backend=backend.name,
            observed=observed,
            steps=steps,
            release=release,
        )

    clearance = Guard(app.slots).clear("prod")
    return Engine(backend, out, environ={}).switch(clearance, app, "prod", build)


def replace_artifact() -> Artifact:
    return Artifact((Unit(key="workload/web", kind="workload", body={}, process="web"),))


def calls(backend: MemoryBackend, *names: str) -> list[str]:
    return [f"{n} {d}" for n, d in backend.calls if n in names]


def test_switch_walks_scale_wait_point_drop_sleep(app: App) -> None:
    backend, out = MemoryBackend(), Lines()
    assert isinstance(switch(app, backend, out, "g1", None), Rolled)
    backend.calls.clear()
    outcome = switch(app, backend, out, "g2", "g1")
    assert isinstance(outcome, Rolled) and outcome.to_revision == 2
    assert calls(backend, "scale", "wait_replicas", "point_host", "drop_host") == [
        "scale g2/web=2",
        "wait_replicas g2/web",
        "point_host shop.example.com->g2",
        "drop_host shop.example.com-x-g1",
        "scale g1/web=0",
    ]
    assert backend.records[2].generation == "g2"
    assert backend.records[1].status == ReleaseStatus.SUPERSEDED


def test_a_failing_route_drop_is_reported_with_its_fix_and_is_not_fatal(app: App) -> None:
    backend, out = MemoryBackend(), Lines()
    switch(app, backend, out, "g1", None)
    backend.undroppable_hosts.add("shop.example.com")
    outcome = switch(app, backend, out, "g2", "g1")
    assert isinstance(outcome, Rolled)
    assert outcome.exit_code == 0
    assert len(outcome.warnings) == 1
    assert "to fix by hand: delete the route for shop.example.com" in outcome.warnings[0]
    assert backend.routes["shop.example.com"] == "g2"
    assert "scale g1/web=0" in calls(backend, "scale")  # the walk went on after the warning


def test_a_generation_that_never_gets_ready_leaves_routes_untouched(app: App) -> None:
    backend, out = MemoryBackend(), Lines()
    switch(app, backend, out, "g1", None)
    backend.calls.clear()
    backend.doomed_images.add("g2")  # the memory backend's WaitReplicas fails for it
    outcome = switch(app, backend, out, "g2", "g1")
    assert isinstance(outcome, RolledBack) and outcome.exit_code == 10
    assert calls(backend, "point_host", "drop_host") == []
    assert backend.routes["shop.example.com"] == "g1"
    # the new generation is put back to sleep; the live one is never scaled
    assert calls(backend, "scale") == ["scale g2/web=2", "scale g2/web=0"]
    assert backend.records[2].status == ReleaseStatus.FAILED


def test_a_no_op_step_says_why(app: App) -> None:
    backend, out = MemoryBackend(), Lines()
    switch(app, backend, out, "g1", None)
    out.lines.clear()
    backend.calls.clear()
    switch(app, backend, out, "g1", "g1")
    assert "[1/1] nothing to do: generation g1 is already live" in out.lines
    assert calls(backend, "apply", "scale", "point_host", "drop_host") == []
