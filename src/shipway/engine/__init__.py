"""Sequencing: lock → anchor → record pending → apply → wait → record → rollback.

Names are imported on first use: ``shipway.api`` names the default timeouts in its
signatures (:mod:`.timeouts`), and that must not load the sequencing for the commands that
never run it (``validate``, ``status``, ``history``, ``logs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shipway.exports import lazy_exports

if TYPE_CHECKING:
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
    from shipway.engine.request import DeployRequest
    from shipway.engine.timeouts import DEFAULT_ROLLBACK_TIMEOUT, DEFAULT_TIMEOUT
    from shipway.errors import Interrupted

_WHERE = {
    "shipway.engine.core": "Engine",
    "shipway.engine.request": "DeployRequest",
    "shipway.engine.outcome": (
        "NoAnchor Outcome RollbackFailed Rolled RolledBack Unchanged outcome_from_json"
    ),
    "shipway.errors": "Interrupted",
    "shipway.engine.timeouts": "DEFAULT_ROLLBACK_TIMEOUT DEFAULT_TIMEOUT",
}
_MODULE_OF, __getattr__ = lazy_exports(__name__, _WHERE, globals())

__all__ = [
    "DEFAULT_ROLLBACK_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "DeployRequest",
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
