"""Destroying a slot: everything shipway made for the app in it, and — only when asked —
its volumes.

What must never happen: data deleted by anything but an explicit, confirmed destroy with
``--volumes`` (invariant 11), or a destroy without the slot's name typed back, whatever the
slot's role: it deletes the release records too, so nothing can be rolled back after it.
"""

from __future__ import annotations

from shipway.backends.protocol import Leftover, LockHolder
from shipway.engine.context import EngineContext
from shipway.engine.signals import signals_raise
from shipway.errors import ConfirmationRequired
from shipway.guard import Clearance
from shipway.spec.model import App


class Destruction(EngineContext):
    """``destroy``: under the slot's lock, the backend deletes what it made there."""

    def leftovers(self, app: App, slot_name: str) -> list[Leftover]:
        """What a destroy would delete (volumes marked ``data``). Read-only."""
        return self.backend.leftovers(app.slots.target(slot_name))

    def destroy(
        self, clearance: Clearance, app: App, slot_name: str, *, volumes: bool = False
    ) -> list[Leftover]:
        """Delete what runs in the slot, its routes, files, snapshots, release records and
        lock; with ``volumes``, its volumes too. Needs a clearance the slot's name was typed
        back for, on every slot. Returns what was deleted."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        if not clearance.confirmed:
            what = "and its volumes " if volumes else ""
            raise ConfirmationRequired(
                f"destroy deletes everything shipway made for {target} {what}(its release "
                f"records too): confirm by passing --confirm {slot_name}; nothing was deleted"
            )
        holder = LockHolder.me(self.lock_ttl)
        with signals_raise(), self.backend.lock(clearance, target, holder, self.reporter):
            return self.backend.destroy(clearance, target, volumes, self.reporter)
