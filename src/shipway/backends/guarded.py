"""The preamble every backend operation shares, written once.

A backend is opened for one app's slot and must never act on another (a clearance for
``shop/staging`` spent on ``shop/prod`` is refused before anything is touched), and once the
slot's lock it holds is lost — taken over after a stall, or deleted — no further mutation may
happen: someone else may own the slot now.

Each backend's state class inherits :class:`Guarded` and says, in ``_lock_problem``, how it
knows its lock is lost (a Lease that changed hands, a lock container that is gone, a lock
file rewritten by another pid).
"""

from __future__ import annotations

from collections.abc import Callable

from shipway.errors import BackendError, LockLost
from shipway.guard import Clearance
from shipway.spec.model import App, Slot, Target


class Guarded:
    """The one app and slot a backend serves, and the checks before each operation."""

    name: str
    app: App
    slot: Slot
    #: why the lock this backend holds is no longer ours (None: it is, or none is held):
    #: each backend's state says it (declared here, defined there: no backend overrides a
    #: method of another class of its own); one that words its own refusal overrides
    #: ``_still_ours`` instead
    _lock_problem: Callable[[], str | None]

    def _serves(self, target: Target) -> None:
        """Refuse a target this backend was not opened for (reads and mutations alike)."""
        if (target.app, target.slot) != (self.app.name, self.slot.name):
            raise BackendError(
                f"this {self.name} backend serves {self.app.name}/{self.slot.name}, not {target}"
            )

    def _guard(self, clearance: Clearance, target: Target) -> None:
        """Before any mutation: the clearance covers exactly this target, the target is the
        one this backend serves, and the lock it holds is still its own."""
        clearance.require_covers(target)
        self._serves(target)
        self._still_ours(target)

    def _still_ours(self, target: Target) -> None:
        """Refuse to go on once the held lock is lost (also between the steps of a wait)."""
        why = self._lock_problem()
        if why is not None:
            raise LockLost(
                f"lost the lock on {target}: {why}; another operation may have taken it "
                "over — stopping"
            )
