"""shipway: a release manager that shows its plan, guards its slots, fails fast, rolls
back, and says honestly how each rollout ended.

The public API is this module's ``__all__`` (a test pins it: growing it is a decision).
Names are imported on first use, so ``shipway --help`` does not pay for the engine.

``shipway.plan`` is the function, always. Importing a submodule sets it as an attribute of
its package, and the ``shipway.plan`` subpackage (the pure planning layer) is imported by the
engine — so without the guard below, ``shipway.plan(app, "staging")`` would call a module.
The subpackage stays importable by name (``from shipway.plan import Plan``).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from shipway.exports import lazy_exports

if TYPE_CHECKING:
    from shipway.api import (
        SlotStatus,
        build,
        clear,
        deploy,
        destroy,
        diff,
        helm_history,
        helm_release,
        history,
        load,
        logs,
        plan,
        promote,
        repair,
        restart,
        rollback,
        run,
        set_image,
        status,
        stop,
    )
    from shipway.backends.protocol import Backend, Reporter
    from shipway.engine import (
        DeployRequest,
        Engine,
        Interrupted,
        NoAnchor,
        Outcome,
        RollbackFailed,
        Rolled,
        RolledBack,
        Unchanged,
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
    from shipway.plan import Change, Diff, Plan
    from shipway.release import Release, ReleaseStatus
    from shipway.spec import App, Slot, Target

__version__ = "0.1.0"

_WHERE = {
    "shipway.api": (
        "SlotStatus build clear deploy destroy diff helm_history helm_release history load logs "
        "plan promote repair restart rollback run set_image status stop"
    ),
    # what api functions take: a backend of one's own (``backend=``), where progress goes
    # (``reporter=``)
    "shipway.backends.protocol": "Backend Reporter",
    "shipway.engine": (
        "DeployRequest Engine Interrupted NoAnchor Outcome RollbackFailed Rolled RolledBack "
        "Unchanged"
    ),
    "shipway.errors": (
        "BackendError ClearanceError ConfirmationMismatch ConfirmationRequired "
        "GuardRefused InputError ShipwayError SlotLocked SpecInvalid StalePlan"
    ),
    "shipway.guard": "Clearance Guard",
    "shipway.plan": "Change Diff Plan",
    "shipway.release": "Release ReleaseStatus",
    "shipway.spec": "App Slot Target",
}
_MODULE_OF, __getattr__ = lazy_exports(__name__, _WHERE, globals())


class _Package(types.ModuleType):
    """This package's module type: a submodule never shadows a public name (see above)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            name in _MODULE_OF
            and isinstance(value, types.ModuleType)
            and value.__name__ == f"{__name__}.{name}"
        ):
            return  # the import system binding a submodule: the public name wins
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__all__ = [
    "App",
    "Backend",
    "BackendError",
    "Change",
    "Clearance",
    "ClearanceError",
    "ConfirmationMismatch",
    "ConfirmationRequired",
    "DeployRequest",
    "Diff",
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
    "Reporter",
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
    "Unchanged",
    "__version__",
    "build",
    "clear",
    "deploy",
    "destroy",
    "diff",
    "helm_history",
    "helm_release",
    "history",
    "load",
    "logs",
    "plan",
    "promote",
    "repair",
    "restart",
    "rollback",
    "run",
    "set_image",
    "status",
    "stop",
]
