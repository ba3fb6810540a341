"""Deploying what already runs: the deployed artifact is re-asserted (drift repaired, nothing
replaced); any change the user controls gives fresh deployment ids (everything rolls)."""

from __future__ import annotations

import pytest

from shipway.backends.memory import MemoryBackend
from shipway.engine import Rolled
from shipway.plan.model import ApplyObject, NoOp
from shipway.spec import App
from tests.conftest import app_from_toml
from tests.engine.test_sequencing import ENV, SPEC, Lines, deploy, engine


@pytest.fixture
def app() -> App:
    return app_from_toml(SPEC)


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def out() -> Lines:
    return Lines()


def test_deploying_the_deployed_release_again_replaces_nothing(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    assert isinstance(deploy(app, backend, out), Rolled)
    live = {k: v.unit.digest for k, v in backend.live.items()}
    plan = engine(backend, out).plan_deploy(app, "test1", image="reg/shop:1")
    assert [type(s) for s in plan.steps] == [NoOp]
    assert plan.release is not None
    assert plan.release.deployment_ids == backend.records[1].deployment_ids
    assert "re-asserts r1" in plan.release.description
    backend.calls.clear()
    assert isinstance(deploy(app, backend, out), Rolled)
    assert [c for c in backend.mutations() if c[0] in ("apply", "remove")] == []
    assert {k: v.unit.digest for k, v in backend.live.items()} == live
    assert str(backend.records[2].status) == "deployed"


def test_a_redeploy_of_the_same_release_repairs_only_what_drifted(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    gone = "workload/worker"
    del backend.live[gone]
    backend.live["workload/web"].state = "stopped"
    plan = engine(backend, out).plan_deploy(app, "test1", image="reg/shop:1")
    applies = {(s.unit, s.action) for s in plan.steps if isinstance(s, ApplyObject)}
    assert applies == {(gone, "create"), ("workload/web", "start")}


def test_any_change_rolls_every_process(app: App, backend: MemoryBackend, out: Lines) -> None:
    deploy(app, backend, out)
    first = dict(backend.records[1].deployment_ids)
    changed = app_from_toml(SPEC.replace('command = "work"', 'command = "work --fast"'))
    plan = engine(backend, out).plan_deploy(changed, "test1", image="reg/shop:1")
    assert plan.release is not None
    assert set(plan.release.deployment_ids.values()).isdisjoint(first.values())
    other_image = engine(backend, out).plan_deploy(app, "test1", image="reg/shop:2")
    assert other_image.release is not None
    assert set(other_image.release.deployment_ids.values()).isdisjoint(first.values())
    new_secret = Lines()
    e = engine(backend, new_secret)
    e.environ = {**ENV, "SHOP_TOKEN": "another-value"}
    rotated = e.plan_deploy(app, "test1", image="reg/shop:1")
    assert rotated.release is not None
    assert set(rotated.release.deployment_ids.values()).isdisjoint(first.values())
