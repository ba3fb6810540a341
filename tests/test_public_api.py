"""Pins the public API: growing or shrinking it must be a visible decision."""

import shipway

EXPECTED = [
    "App", "BackendError", "Clearance", "ClearanceError", "ConfirmationMismatch",
    "ConfirmationRequired", "Engine", "Guard", "GuardRefused", "InputError", "Interrupted",
    "NoAnchor", "Outcome", "Plan", "Release", "ReleaseStatus", "RollbackFailed", "Rolled",
    "RolledBack", "ShipwayError", "Slot", "SlotLocked", "SlotStatus", "SpecInvalid", "StalePlan",
    "Target", "__version__", "clear", "deploy", "diff", "history", "load", "logs", "plan",
    "promote", "repair", "restart", "rollback", "status", "stop",
]  # fmt: skip


def test_public_api_is_exactly_this() -> None:
    assert shipway.__all__ == EXPECTED


def test_all_is_sorted_and_resolvable() -> None:
    assert shipway.__all__ == sorted(shipway.__all__)
    for name in shipway.__all__:
        assert getattr(shipway, name) is not None
