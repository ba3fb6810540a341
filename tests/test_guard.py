from __future__ import annotations

import copy
import pickle
from typing import Any

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


# -- freezes (spec/freeze.py): the Guard refuses a frozen slot, break-glass overrides ----

FROZEN_SPEC = """
[app]
name = "shop"
image = "reg/shop:1"

[processes.web]
command = "serve"
port = 8000

[slots.prod]
role = "production"
freeze = [
  { start = "fri 18:00", end = "mon 08:00", timezone = "Europe/Berlin", reason = "weekend" },
  { start = "2026-12-24", end = "2026-12-26", reason = "holidays" },
]

[slots.test1]
freeze = [{ start = "22:00", end = "06:00", timezone = "UTC", reason = "nightly batch" }]
"""


def _frozen_app() -> Any:
    from tests.conftest import app_from_toml

    return app_from_toml(FROZEN_SPEC)


def _at(text: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(text)


@pytest.mark.parametrize(
    ("slot", "now", "frozen_until"),
    [
        # Friday 18:30 in Berlin (UTC+1 in winter) is 17:30 UTC: frozen until Monday 07:00 UTC
        ("prod", "2026-12-04T17:30:00+00:00", "2026-12-07T07:00:00+00:00"),
        ("prod", "2026-12-04T16:59:00+00:00", None),  # 17:59 Berlin, Friday: not yet
        ("prod", "2026-12-07T06:59:00+00:00", "2026-12-07T07:00:00+00:00"),  # Monday 07:59
        ("prod", "2026-12-07T07:00:00+00:00", None),  # Monday 08:00 Berlin: over
        ("prod", "2026-12-24T10:00:00+00:00", "2026-12-27T00:00:00+00:00"),  # through the 26th
        ("test1", "2026-12-02T23:00:00+00:00", "2026-12-03T06:00:00+00:00"),
        ("test1", "2026-12-03T05:00:00+00:00", "2026-12-03T06:00:00+00:00"),  # past midnight
        ("test1", "2026-12-03T12:00:00+00:00", None),
    ],
)
def test_declared_windows_freeze_the_slot_at_their_times(
    slot: str, now: str, frozen_until: str | None
) -> None:
    from shipway.errors import SlotFrozen

    app = _frozen_app()
    guard = Guard(app.slots)
    confirm = slot if slot == "prod" else None
    if frozen_until is None:
        assert guard.clear(slot, confirm, kept=list, now=_at(now)).slot == slot
        return
    with pytest.raises(SlotFrozen) as refused:
        guard.clear(slot, confirm, kept=list, now=_at(now))
    assert refused.value.exit_code == 8
    assert f"frozen until {frozen_until}" in str(refused.value)


def test_a_kept_freeze_is_refused_with_its_reason_and_end_until_the_glass_is_broken() -> None:
    from shipway.errors import SlotFrozen
    from shipway.guard import breaking_glass
    from shipway.spec.freeze import Freeze

    app = _frozen_app()
    kept = [Freeze("incident 4711", "2026-12-03T15:00:00+00:00", by="ops@desk")]
    now = _at("2026-12-03T12:00:00+00:00")
    with pytest.raises(SlotFrozen, match="incident 4711") as refused:
        Guard(app.slots).clear("test1", kept=lambda: kept, now=now)
    assert "until 2026-12-03T15:00:00+00:00" in str(refused.value)
    assert "--break-glass" in str(refused.value)
    # over once it ends
    assert Guard(app.slots).clear("test1", kept=lambda: kept, now=_at("2026-12-03T15:00:01+00:00"))
    with breaking_glass("rollback of the bad release"):
        clearance = Guard(app.slots).clear("test1", kept=lambda: kept, now=now)
    assert clearance.break_glass == "rollback of the bad release"
    # confirmation is still asked first, frozen or not: nothing is read before it
    read: list[int] = []
    with pytest.raises(ConfirmationRequired):
        Guard(app.slots).clear("prod", kept=lambda: read.append(1) or kept, now=now)
    assert read == []


def test_break_glass_on_a_slot_that_is_not_frozen_records_nothing() -> None:
    from shipway.guard import breaking_glass

    app = _frozen_app()
    with breaking_glass("just in case"):
        clearance = Guard(app.slots).clear("test1", kept=list, now=_at("2026-12-03T12:00:00+00:00"))
    assert clearance.break_glass is None
