"""Sequencing: lock → anchor → record pending → apply → wait → record → rollback."""

from shipway.engine.context import DEFAULT_ROLLBACK_TIMEOUT, DEFAULT_TIMEOUT
from shipway.engine.core import Engine
from shipway.engine.outcome import (
    NoAnchor,
    Outcome,
    RollbackFailed,
    Rolled,
    RolledBack,
    Unchanged,
    outcome_from_json,
)
from shipway.engine.signals import Interrupted

__all__ = [
    "DEFAULT_ROLLBACK_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "Engine",
    "Interrupted",
    "NoAnchor",
    "Outcome",
    "RollbackFailed",
    "Rolled",
    "RolledBack",
    "Unchanged",
    "outcome_from_json",
]
