"""shipway: a release manager that shows its plan, guards its slots, fails fast, rolls
back, and says honestly how each rollout ended.

The public API is this module's ``__all__`` (a test pins it: growing it is a decision).
"""

from shipway.api import (
    SlotStatus,
    clear,
    deploy,
    diff,
    history,
    load,
    logs,
    plan,
    promote,
    restart,
    rollback,
    status,
    stop,
)
from shipway.engine import (
    Engine,
    Interrupted,
    NoAnchor,
    Outcome,
    RollbackFailed,
    Rolled,
    RolledBack,
)
from shipway.errors import (
    BackendError,
    ClearanceError,
    ConfirmationMismatch,
    ConfirmationRequired,
    GuardRefused,
    InputError,
    ShipwayError,
    SlotLocked,
    SpecInvalid,
    StalePlan,
)
from shipway.guard import Clearance, Guard
from shipway.plan import Plan
from shipway.release import Release, ReleaseStatus
from shipway.spec import App, Slot, Target

__version__ = "0.1.0"

__all__ = [
    "App",
    "BackendError",
    "Clearance",
    "ClearanceError",
    "ConfirmationMismatch",
    "ConfirmationRequired",
    "Engine",
    "Guard",
    "GuardRefused",
    "InputError",
    "Interrupted",
    "NoAnchor",
    "Outcome",
    "Plan",
    "Release",
    "ReleaseStatus",
    "RollbackFailed",
    "Rolled",
    "RolledBack",
    "ShipwayError",
    "Slot",
    "SlotLocked",
    "SlotStatus",
    "SpecInvalid",
    "StalePlan",
    "Target",
    "__version__",
    "clear",
    "deploy",
    "diff",
    "history",
    "load",
    "logs",
    "plan",
    "promote",
    "restart",
    "rollback",
    "status",
    "stop",
]
