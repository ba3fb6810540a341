"""The guard: the only way to obtain a :class:`Clearance`, the token every mutation needs.

What must never happen: a change to a slot nobody cleared, or a clearance for one slot
spent on another. So a Clearance cannot be constructed, subclassed, copied or pickled
outside this module, and :meth:`Clearance.require_covers` also rejects any object this
module did not issue itself. Every mutating backend operation calls ``require_covers``
before it touches anything.
"""

from __future__ import annotations

import weakref
from typing import Any, NoReturn

from shipway.errors import ClearanceError, ConfirmationMismatch, ConfirmationRequired
from shipway.spec.model import SlotRegistry, Target

_ISSUED: weakref.WeakSet[Clearance] = weakref.WeakSet()


class Clearance:
    """Permission to change exactly one app in exactly one slot."""

    __slots__ = ("__weakref__", "_app", "_confirmed", "_slot")
    _app: str
    _slot: str
    _confirmed: bool

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a Clearance is issued only by Guard.clear()")

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError("Clearance cannot be subclassed")

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("a Clearance is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("a Clearance is immutable")

    def __copy__(self) -> NoReturn:
        raise TypeError("a Clearance cannot be copied")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError("a Clearance cannot be copied")

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("a Clearance cannot be pickled")

    @property
    def app(self) -> str:
        return self._app

    @property
    def slot(self) -> str:
        return self._slot

    @property
    def confirmed(self) -> bool:
        """True when the slot's name was typed back (guarded / production slots)."""
        return self._confirmed

    def require_covers(self, target: Target) -> None:
        """Refuse unless this clearance was issued by the Guard for exactly ``target``."""
        if self not in _ISSUED:
            raise ClearanceError("this clearance was not issued by the guard")
        if (target.app, target.slot) != (self._app, self._slot):
            raise ClearanceError(
                f"clearance for {self._app}/{self._slot} cannot be used on "
                f"{target.app}/{target.slot}"
            )

    def __repr__(self) -> str:
        return f"<Clearance {self._app}/{self._slot}>"


def _issue(app: str, slot: str, confirmed: bool) -> Clearance:
    clearance = object.__new__(Clearance)
    object.__setattr__(clearance, "_app", app)
    object.__setattr__(clearance, "_slot", slot)
    object.__setattr__(clearance, "_confirmed", confirmed)
    _ISSUED.add(clearance)
    return clearance


class Guard:
    """Issues clearances for the slots of one app, asking for confirmation where needed."""

    def __init__(self, registry: SlotRegistry) -> None:
        self._registry = registry

    def needs_confirmation(self, slot: str) -> bool:
        return self._registry.get(slot).needs_confirmation

    def clear(self, slot: str, confirm: str | None = None) -> Clearance:
        """A clearance for ``slot``. Guarded or production slots need ``confirm == slot``.

        A confirmation naming another slot is refused even where none is needed: it means
        the user believes they are changing something else.
        """
        s = self._registry.get(slot)
        if confirm is not None and confirm != s.name:
            raise ConfirmationMismatch(
                f"confirmation {confirm!r} does not match slot {s.name!r}; nothing was changed "
                f"(hint: pass --confirm {s.name} to change slot {s.name})"
            )
        if s.needs_confirmation and confirm is None:
            why = "production" if s.role == "production" else "guarded"
            raise ConfirmationRequired(
                f"slot {s.name!r} is {why}: confirm by passing --confirm {s.name}, "
                f"or run in a terminal and type the slot's name when asked"
            )
        return _issue(self._registry.app, s.name, confirmed=confirm is not None)
