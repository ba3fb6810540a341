"""When a Lease counts as expired (pure): by the time this client saw it last change, as
client-go's leader election judges it — never by the holder's renewTime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shipway.backends.kubernetes.lease import LeaseState, LeaseTiming, Observation, lease_name

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def state(renewed: datetime | None, duration: float = 15, version: str = "7") -> LeaseState:
    return LeaseState(
        holder="a@h (pid 1)", renewed=renewed, duration=duration, since="", version=version
    )


def test_expired_only_once_unchanged_for_its_duration_on_this_client_s_clock() -> None:
    seen = Observation(version="7", at=100.0)
    # renewed two hours ago by the holder's clock: not expired, it was only just seen
    long_ago = state(NOW - timedelta(hours=2))
    assert not seen.expired(long_ago, now=100.0 + 14.9)
    assert seen.expired(long_ago, now=100.0 + 15.0)
    # renewed "in the future" by a clock that runs ahead: expired all the same
    assert seen.expired(state(NOW + timedelta(hours=2)), now=115.0)


def test_a_changed_lease_is_not_expired_however_long_ago_it_was_first_seen() -> None:
    seen = Observation(version="7", at=100.0)
    assert not seen.expired(state(NOW, version="8"), now=10_000.0)


def test_expiry_said_to_a_user_is_renewal_plus_duration() -> None:
    assert state(NOW, 30).expires() == NOW + timedelta(seconds=30)
    assert state(None).expires() is None


def test_client_go_s_timing_and_shorter_ttls_scaled_down() -> None:
    assert LeaseTiming.of(60) == LeaseTiming(duration=15, renew_deadline=10.0, retry=2.0)
    short = LeaseTiming.of(1.5)
    assert short.duration == 2 and short.renew_deadline < short.duration
    assert 0 < short.retry < short.renew_deadline


def test_one_lease_per_app_and_slot() -> None:
    assert lease_name("shop", "prod") == "shipway-lock.shop.prod"
    assert lease_name("shop", "prod") != lease_name("shop", "test1")
