from __future__ import annotations

import copy
import pickle

import pytest

from shipway.errors import ClearanceError, ConfirmationMismatch, ConfirmationRequired
from shipway.guard import Clearance, Guard
from shipway.spec import Target
from tests.conftest import app_from_toml

SPEC = """
[app]
name = "shop"
[processes.web]
command = "x"
[slots.test1]
promotes_to = "prod"
[slots.staging]
guarded = true
[slots.prod]
role = "production"
"""


@pytest.fixture
def guard() -> Guard:
    return Guard(app_from_toml(SPEC).slots)


def test_open_slot_needs_no_confirmation(guard: Guard) -> None:
    c = guard.clear("test1")
    assert (c.app, c.slot, c.confirmed) == ("shop", "test1", False)
    c.require_covers(Target("shop", "test1", "local"))


@pytest.mark.parametrize("slot", ["staging", "prod"])
def test_guarded_and_production_slots_need_their_name(guard: Guard, slot: str) -> None:
    with pytest.raises(ConfirmationRequired, match=f"--confirm {slot}"):
        guard.clear(slot)
    with pytest.raises(ConfirmationMismatch):
        guard.clear(slot, confirm="test1")
    assert guard.clear(slot, confirm=slot).confirmed


def test_a_confirmation_naming_another_slot_is_refused_even_where_none_is_needed(
    guard: Guard,
) -> None:
    with pytest.raises(ConfirmationMismatch):
        guard.clear("test1", confirm="prod")


def test_a_clearance_does_not_cover_another_slot_or_app(guard: Guard) -> None:
    c = guard.clear("test1")
    with pytest.raises(ClearanceError, match="cannot be used on shop/prod"):
        c.require_covers(Target("shop", "prod", "local"))
    with pytest.raises(ClearanceError):
        c.require_covers(Target("other", "test1", "local"))


def test_clearance_cannot_be_constructed(guard: Guard) -> None:
    with pytest.raises(TypeError):
        Clearance()
    with pytest.raises(TypeError):
        Clearance("shop", "prod")


def test_clearance_cannot_be_subclassed() -> None:
    with pytest.raises(TypeError):
        type("Fake", (Clearance,), {})


def test_clearance_cannot_be_copied_pickled_or_changed(guard: Guard) -> None:
    c = guard.clear("test1")
    with pytest.raises(TypeError):
        copy.copy(c)
    with pytest.raises(TypeError):
        copy.deepcopy(c)
    with pytest.raises(TypeError):
        pickle.dumps(c)
    with pytest.raises(AttributeError):
        c._slot = "prod"  # type: ignore[misc]
    assert c.slot == "test1"


def test_a_forged_clearance_covers_nothing() -> None:
    forged = object.__new__(Clearance)
    object.__setattr__(forged, "_app", "shop")
    object.__setattr__(forged, "_slot", "prod")
    object.__setattr__(forged, "_confirmed", True)
    with pytest.raises(ClearanceError, match="not issued by the guard"):
        forged.require_covers(Target("shop", "prod", "local"))
