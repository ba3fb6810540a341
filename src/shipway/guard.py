"""The guard: the only way to obtain a :class:`Clearance`, the token every mutation needs.

What must never happen: a change to a slot nobody cleared, or a clearance for one slot
spent on another. So a Clearance cannot be constructed, subclassed, copied or pickled
outside this module, and :meth:`Clearance.require_covers` also rejects any object this
module did not issue itself. Every mutating backend operation calls ``require_covers``
before it touches anything.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, NoReturn

from shipway.errors import (
    ClearanceError,
    ConfirmationMismatch,
    ConfirmationRequired,
    InputError,
    SlotFrozen,
)
from shipway.spec.freeze import Freeze, active
from shipway.spec.model import SlotRegistry, Target

#: the reason to override a freeze, for the clearances issued within ``breaking_glass``
_BREAK_GLASS: ContextVar[str | None] = ContextVar("shipway_break_glass", default=None)


@contextmanager
def breaking_glass(reason: str | None) -> Iterator[None]:
    """Within the block, a frozen slot is cleared anyway (``--break-glass REASON``): the
    clearance carries the reason, so the release records it and the events tell it. None:
    no override (the block changes nothing)."""
    if reason is not None and not reason.strip():
        raise InputError("--break-glass needs a reason (e.g. --break-glass 'incident 4711')")
    token = _BREAK_GLASS.set(reason.strip() if reason else None)
    try:
        yield
    finally:
        _BREAK_GLASS.reset(token)


_ISSUED: weakref.WeakSet[Clearance] = weakref.WeakSet()


class Clearance:
    """Permission to change exactly one app in exactly one slot."""

    __slots__ = ("__weakref__", "_app", "_break_glass", "_confirmed", "_slot")
    _app: str
    _slot: str
    _confirmed: bool
    _break_glass: str | None

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

    @property
    def break_glass(self) -> str | None:
        """Why a freeze was overridden (``--break-glass REASON``); None: it was not."""
        return self._break_glass

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


def _issue(app: str, slot: str, confirmed: bool, break_glass: str | None = None) -> Clearance:
    clearance = object.__new__(Clearance)
    object.__setattr__(clearance, "_app", app)
    object.__setattr__(clearance, "_slot", slot)
    object.__setattr__(clearance, "_confirmed", confirmed)
    object.__setattr__(clearance, "_break_glass", break_glass)
    _ISSUED.add(clearance)
    return clearance


class Guard:
    """Issues clearances for the slots of one app, asking for confirmation where needed."""

    def __init__(self, registry: SlotRegistry) -> None:
        self._registry = registry

    def needs_confirmation(self, slot: str) -> bool:
        return self._registry.get(slot).needs_confirmation

    def clear(
        self,
        slot: str,
        confirm: str | None = None,
        *,
        kept: Callable[[], Sequence[Freeze]] | None = None,
        now: datetime | None = None,
    ) -> Clearance:
        """A clearance for ``slot``. Guarded or production slots need ``confirm == slot``.

        A confirmation naming another slot is refused even where none is needed: it means
        the user believes they are changing something else.

        A frozen slot is refused (:class:`SlotFrozen`, naming why and until when) — by the
        freezes its target keeps (``kept``, read only once the confirmation is right) and
        the windows its spec declares — unless the glass is broken (:func:`breaking_glass`).
        ``kept`` None: a clearance to change the freeze itself (``freeze``/``unfreeze``).
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
        glass = None
        if kept is not None:
            held = active(s.freeze, kept(), now or datetime.now(UTC))
            glass = _BREAK_GLASS.get() if held else None
            if held and glass is None:
                raise SlotFrozen(s.name, [f.line() for f in held])
        return _issue(self._registry.app, s.name, confirm is not None, glass)
