"""Destroying a slot: everything shipway made for the app in it, and — only when asked —
its volumes.

What must never happen: data deleted by anything but an explicit, confirmed destroy with
``--volumes`` (invariant 11), or a destroy without the slot's name typed back, whatever the
slot's role: it deletes the release records too, so nothing can be rolled back after it.
"""

from __future__ import annotations

from shipway.backends.freezes import kept_freezes
from shipway.backends.protocol import Leftover, LockHolder
from shipway.engine.done import Done
from shipway.engine.signals import signals_raise
from shipway.engine.telling import Telling
from shipway.errors import ConfirmationRequired
from shipway.guard import Clearance
from shipway.spec.model import App


class Destruction(Telling):
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
        what = "everything" + (" and its volumes" if volumes else " but its volumes")
        with (
            signals_raise(),
            self.backend.lock(clearance, target, holder, self.reporter),
            self._telling(clearance, target, app, "destroy", f"delete {what}"),
        ):
            kept = [item for item in self.backend.leftovers(target) if item.data]
            gone = self.backend.destroy(clearance, target, volumes, self.reporter)
            kept = [] if volumes else kept
            left = f"; kept {len(kept)} volume(s)" if kept else ""
            more = [f.line() for f in kept_freezes(self.backend, target)]
            more = [f"the freeze stays ({m}): shipway unfreeze {slot_name} lifts it"
                    for m in more]  # fmt: skip
            result = {
                "slot": slot_name,
                "deleted": [item.to_json() for item in gone],
                "kept": [item.to_json() for item in kept],
            }
            line = f"destroyed {target}: deleted {len(gone)}{left}"
            self._done(Done("destroy", str(target), line, result, tuple(more)))
            return gone
