"""``freeze`` and ``unfreeze``: the freeze a slot's target keeps (backends/freezes.py), set
or lifted under the slot's lock like any change — so it never lands in the middle of an
operation's own reads — and told like any operation (``started`` … ``ended``, notified).

Changing the freeze needs the slot's clearance but is never refused by a freeze (the
Guard's ``kept=None``). A freeze set while an operation runs waits for its lock, and then
stops the next operation, not that one.
"""

from __future__ import annotations

from datetime import UTC, datetime

from shipway.backends.freezes import KeepsFreezes, kept_freezes
from shipway.backends.protocol import LockHolder
from shipway.engine.done import Done
from shipway.engine.signals import signals_raise
from shipway.engine.telling import Telling
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.spec.freeze import Freeze, active
from shipway.spec.model import App


class Freezing(Telling):
    """Setting and lifting the freeze kept in the slot's target."""

    def keep_freeze(
        self, clearance: Clearance, app: App, slot_name: str, frozen: Freeze | None
    ) -> list[Freeze]:
        """Set ``frozen`` (None: lift the kept one) under the slot's lock; the freezes
        that hold now (a window the spec declares still holds after an unfreeze)."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        keeper = self.backend
        if not isinstance(keeper, KeepsFreezes):
            raise InputError(f"the {target.backend} backend keeps no freeze in its target")
        verb = "freeze" if frozen is not None else "unfreeze"
        what = f"frozen until {frozen.until}: {frozen.reason}" if frozen else "lift the freeze"
        holder = LockHolder.me(self.lock_ttl)
        with (
            signals_raise(),
            self.backend.lock(clearance, target, holder, self.reporter),
            self._telling(clearance, target, app, verb, what),
        ):
            keeper.write_freeze(clearance, target, frozen)
            held = active(
                app.slots.get(slot_name).freeze,
                kept_freezes(keeper, target),
                datetime.now(UTC),
            )
            said = f"frozen until {frozen.until}" if frozen else "unfrozen"
            more = [f.line() for f in held] or [f"no freeze holds {slot_name} now"]
            result = {"slot": slot_name, "action": said, "freezes": [f.to_json() for f in held]}
            self._done(Done(verb, str(target), f"{slot_name}: {said}", result, tuple(more)))
            return held
