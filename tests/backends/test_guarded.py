"""The preamble every backend operation shares: the right slot, a covering clearance, a
lock still held — checked before anything is touched."""

from __future__ import annotations

import pytest

from shipway.backends.guarded import Guarded
from shipway.errors import BackendError, ClearanceError, LockLost
from shipway.guard import Guard
from tests.conftest import app_from_toml

SPEC = """
[app]
name = "shop"
[processes.web]
command = "x"
[slots.a]
backend = "local"
[slots.b]
backend = "local"
"""


class Probe(Guarded):
    name = "probe"

    def __init__(self, slot: str) -> None:
        self.app = app_from_toml(SPEC)
        self.slot = self.app.slots.get(slot)
        self.lost: str | None = None

    def _lock_problem(self) -> str | None:
        return self.lost


def test_the_guard_checks_clearance_target_and_lock_in_that_order() -> None:
    probe = Probe("a")
    guard = Guard(probe.app.slots)
    a, b = probe.app.slots.target("a"), probe.app.slots.target("b")
    probe._guard(guard.clear("a"), a)  # all good: nothing raised
    with pytest.raises(ClearanceError):
        probe._guard(guard.clear("a"), b)  # a clearance for a, spent on b
    with pytest.raises(BackendError, match="serves shop/a, not shop/b"):
        probe._guard(guard.clear("b"), b)  # the right clearance, the wrong backend
    probe.lost = "the Lease changed hands"
    with pytest.raises(LockLost, match="lost the lock on shop/a: the Lease changed hands"):
        probe._guard(guard.clear("a"), a)
