"""What every backend's one-off command (``shipway run``) shares: the exit codes a shell
gives when a command cannot run, and the signal handling while a command runs elsewhere
(a container, a pod) that must be removed on every path.

What must never happen: a one-off container or pod left behind because shipway was told to
stop — SIGTERM and SIGHUP raise here, so the caller's ``finally`` removes it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: what a shell answers when a command cannot be found, or is found but cannot be run
NOT_FOUND = 127
NOT_RUNNABLE = 126


class Stopped(BaseException):
    """A signal asked shipway to stop while a one-off command ran; ``exit_code`` is
    128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


def exit_code_of_returncode(code: int) -> int:
    """A subprocess's return code as a shell reports it (-N, killed by signal N → 128+N)."""
    return 128 - code if code < 0 else code


@contextlib.contextmanager
def stopped_on_signals() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise :class:`Stopped` (in the main thread
    only; elsewhere nothing changes), so whatever the block made is removed by its
    ``finally``. SIGINT keeps raising KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _: FrameType | None) -> None:
        raise Stopped(signum)

    before = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
