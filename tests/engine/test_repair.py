"""Repair: re-assert the deployed release as recorded (a new revision), changing only what
drifted; a deploy, by contrast, always rolls every process to fresh deployment ids."""

from __future__ import annotations

import pytest

from shipway.backends.memory import MemoryBackend
from shipway.engine import Rolled, Unchanged
from shipway.errors import InputError, StalePlan
from shipway.guard import Guard
from shipway.plan.model import ApplyObject, NoOp, Remove
from shipway.release.artifact import Unit
from shipway.spec import App
from tests.engine.test_sequencing import Lines, deploy, engine


def repair(app: App, backend: MemoryBackend, out: Lines, **kw: object) -> object:
    clearance = Guard(app.slots).clear("test1")
    return engine(backend, out).repair(clearance, app, "test1", **kw)  # type: ignore[arg-type]


def test_repair_changes_only_what_drifted(app: App, backend: MemoryBackend, out: Lines) -> None:
    deploy(app, backend, out)
    first = backend.records[1]
    del backend.live["workload/worker"]
    backend.live["workload/web"].state = "stopped"
    live = type(backend.live["config/shop"])
    backend.live["stray/thing"] = live(unit=Unit(key="stray/thing", kind="x", body={}))
    plan = engine(backend, out).plan_repair(app, "test1")
    applies = {(s.unit, s.action) for s in plan.steps if isinstance(s, ApplyObject)}
    assert applies == {("workload/worker", "create"), ("workload/web", "start")}
    assert {s.unit for s in plan.steps if isinstance(s, Remove)} == {"stray/thing"}
    assert plan.release is not None and plan.release.description == "repair: re-assert r1"
    assert plan.release.deployment_ids == first.deployment_ids
    backend.calls.clear()
    assert isinstance(repair(app, backend, out), Rolled)
    assert not any(c[0] == "run_release_command" for c in backend.calls)  # no migrations
    assert backend.records[2].artifact == first.artifact
    assert str(backend.records[2].status) == "deployed"
    assert [type(s) for s in engine(backend, out).plan_repair(app, "test1").steps] == [NoOp]


def test_a_forced_deploy_still_rolls_every_process(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    deploy(app, backend, out, force=True)
    assert set(backend.records[1].deployment_ids.values()).isdisjoint(
        backend.records[2].deployment_ids.values()
    )


def test_a_repair_with_nothing_to_do_records_no_revision(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    plan = engine(backend, out).plan_repair(app, "test1")
    assert plan.unchanged and plan.release is None
    assert plan.describe()[0].endswith(": no changes")
    backend.calls.clear()
    outcome = repair(app, backend, out)
    assert isinstance(outcome, Unchanged) and outcome.exit_code == 0
    assert "no changes" in outcome.line() and "runs r1 as recorded" in outcome.line()
    assert sorted(backend.records) == [1]
    assert [c for c in backend.mutations() if c[0] != "lock"] == []
    assert backend.lock_holder is None


def test_repair_needs_a_deployed_release(app: App, backend: MemoryBackend, out: Lines) -> None:
    with pytest.raises(InputError, match="nothing is deployed"):
        engine(backend, out).plan_repair(app, "test1")


def test_a_saved_repair_plan_is_refused_when_stale(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    backend.live["workload/web"].state = "stopped"
    saved = engine(backend, out).plan_repair(app, "test1")
    del backend.live["workload/worker"]
    with pytest.raises(StalePlan):
        repair(app, backend, out, saved=saved)
