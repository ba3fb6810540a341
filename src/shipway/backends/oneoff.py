"""What every backend's one-off command (``shipway run``) shares: the exit codes a shell
gives when a command cannot run, and the signal handling while a command runs elsewhere
(a container, a pod) that must be removed on every path.

What must never happen: a one-off container or pod left behind because shipway was told to
stop — SIGTERM and SIGHUP raise here, so the caller's ``finally`` removes it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
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


#: the label a one-off container carries: who runs it (``HOST:PID:START``, the process's
#: start time in clock ticks since boot), so a later run can prove it orphaned
OWNER_LABEL = "org.shipway.one-off-owner"


def owner() -> str:
    """This process, as a one-off's owner: its host name, pid and start time (a pid alone
    may be reused by another process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rfind(")") + 2 :].split()[19]


def orphaned(label: str | None) -> bool:
    """Whether the shipway a one-off's owner label names is provably gone: it ran on this
    machine, and its pid is not running or is another process now. Another machine's, or
    no label: not provable, never."""
    if not label or label.count(":") < 2:
        return False
    host, pid, start = label.rsplit(":", 2)
    if host != socket.gethostname() or not pid.isdigit() or not start:
        return False
    return _start_time(int(pid)) != start


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
