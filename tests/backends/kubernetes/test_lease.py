"""When a Lease counts as held (pure), from the fields client-go's leader election uses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shipway.backends.kubernetes.lease import LeaseState, lease_name

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def state(holder: str | None, renewed: datetime | None, duration: float = 60) -> LeaseState:
    return LeaseState(holder=holder, renewed=renewed, duration=duration, since="")


def test_held_while_renewed_within_its_duration() -> None:
    assert state("a@h (pid 1)", NOW - timedelta(seconds=59)).held(NOW)
    assert not state("a@h (pid 1)", NOW - timedelta(seconds=60)).held(NOW)


def test_released_or_never_renewed_is_free() -> None:
    assert not state(None, NOW).held(NOW)
    assert not state("a@h (pid 1)", None).held(NOW)


def test_expiry_is_renewal_plus_duration() -> None:
    assert state("x", NOW, 30).expires() == NOW + timedelta(seconds=30)


def test_one_lease_per_app_and_slot() -> None:
    assert lease_name("shop", "prod") == "shipway-lock.shop.prod"
    assert lease_name("shop", "prod") != lease_name("shop", "test1")
