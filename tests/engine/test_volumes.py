"""The engine and volumes, against the in-memory backend: no rollout removes a volume, a
plan says what volumes it runs with, and destroy needs the slot's name typed back on every
slot, takes the lock first, and deletes volumes only when asked."""

from __future__ import annotations

from shipway import api
from shipway.backends.memory import MemoryBackend
from shipway.engine import Rolled
from shipway.errors import ConfirmationRequired
from shipway.plan.model import Plan, Remove
from tests.conftest import app_from_toml

SPEC = """
[app]
name = "shop"
image = "reg/shop:1"

[processes.web]
command = "serve"

[volumes.data]
path = "data"

[slots.test1]
"""


def test_no_rollout_removes_a_volume_not_even_one_the_release_never_declared() -> None:
    backend = MemoryBackend()
    without = app_from_toml(SPEC.replace('[volumes.data]\npath = "data"\n', ""))
    assert isinstance(api.deploy(without, "test1", backend=backend), Rolled)
    with_volume = app_from_toml(SPEC)
    assert isinstance(api.deploy(with_volume, "test1", backend=backend), Rolled)
    assert "volume/data" in backend.live
    # back to r1, which had no volume: the volume stays, and no plan step touches it
    plan = api.plan(without, "test1", backend=backend)
    assert not any(isinstance(s, Remove) and s.kind == "volume" for s in plan.steps)
    outcome = api.rollback(with_volume, "test1", 1, backend=backend)
    assert isinstance(outcome, Rolled), outcome.line()
    assert "volume/data" in backend.live
    api.stop(with_volume, "test1", backend=backend)
    assert list(backend.live) == ["volume/data"]


def test_a_plan_lists_the_volumes_it_runs_with_and_notes_round_trip() -> None:
    backend = MemoryBackend()
    app = app_from_toml(SPEC)
    api.deploy(app, "test1", backend=backend)
    plan = api.plan(app, "test1", backend=backend)
    assert plan.notes == ("volume data: volume/data, present",)
    assert "  volume data: volume/data, present" in plan.describe()
    again = Plan.from_json(plan.to_json())
    assert again.notes == plan.notes and again.fingerprint == plan.fingerprint


def test_destroy_needs_the_slot_typed_back_even_on_an_unguarded_slot() -> None:
    backend = MemoryBackend()
    app = app_from_toml(SPEC)
    api.deploy(app, "test1", backend=backend)
    backend.calls.clear()
    try:
        api.destroy(app, "test1", backend=backend)
    except ConfirmationRequired as exc:
        assert "--confirm test1" in str(exc) and "nothing was deleted" in str(exc)
    else:
        raise AssertionError("destroy without confirmation was not refused")
    assert backend.mutations() == []  # refused before the lock or anything else
    assert backend.records

    gone = api.destroy(app, "test1", confirm="test1", backend=backend)
    assert [m for m, _ in backend.mutations()] == ["lock", "destroy"]
    assert not any(item.data for item in gone)
    assert list(backend.live) == ["volume/data"] and not backend.records

    gone = api.destroy(app, "test1", volumes=True, confirm="test1", backend=backend)
    assert [item.kind for item in gone] == ["volume"] and backend.live == {}
