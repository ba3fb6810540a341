"""SIGINT/SIGTERM during an operation become an exception, so the engine can mark the
pending release failed and every ``with`` block (the lock) is exited properly."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType

from shipway.errors import Interrupted

Handler = Callable[[int, FrameType | None], None]


@contextmanager
def _handling(handler: Handler) -> Iterator[None]:
    """SIGINT and SIGTERM go to ``handler`` within the block, then back to what they were
    (main thread only: elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class _Settled:
    """Set once an operation's outcome is decided and recorded: from then on a signal can
    no longer change it, so it is said and the process goes on to report that outcome and
    exit with its code (the lock is released, the line printed) — a SIGTERM landing after
    ``rolled`` was recorded must not exit 143 as if the deploy had been cut short."""

    outcome: str | None = None
    say: Callable[[str], None] | None = None


def settle(outcome: str, say: Callable[[str], None]) -> None:
    """The operation's outcome (its one-line text) is decided: signals stop interrupting."""
    _Settled.outcome, _Settled.say = outcome, say


def settled_outcome() -> str | None:
    """The settled outcome's line, once an operation has ended (None before)."""
    return _Settled.outcome


def _settled(signum: int) -> bool:
    if _Settled.outcome is None:
        return False
    if _Settled.say is not None:
        _Settled.say(
            f"{signal.Signals(signum).name} after the operation ended ({_Settled.outcome}): "
            "finishing, with that outcome"
        )
    return True


def signals_raise(*, fresh: bool = True) -> AbstractContextManager[None]:
    """Within the block, SIGINT and SIGTERM raise Interrupted (main thread only) — until an
    outcome is settled (:func:`settle`), after which they are said and ignored. ``fresh``
    (an operation starting) forgets an earlier operation's settled outcome."""
    if fresh:
        _Settled.outcome = None

    def handler(signum: int, frame: FrameType | None) -> None:
        if not _settled(signum):
            raise Interrupted(signum)

    return _handling(handler)


def signals_deferred(say: Callable[[str], None]) -> AbstractContextManager[None]:
    """Within the block (a short write that must not be cut in half, like recording a
    release that is live), a first SIGINT/SIGTERM is said and the block finishes; a second
    one raises Interrupted there and then (main thread only)."""
    got: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if _settled(signum):
            return
        if got:
            raise Interrupted(signum)
        got.append(signum)
        say(
            f"{signal.Signals(signum).name}: finishing the release record first "
            "(signal again to stop now)"
        )

    return _handling(handler)
