"""One-off commands on this machine (``shipway run``): a subprocess in the deployed
release's snapshot, with the environment its process gets (:mod:`.environment`).

Its standard output and error are this process's own, and so is the terminal: an
interactive command (a shell, ``manage.py createsuperuser``) works as if started here.
Standard input is passed through when asked (``-i``, the default on a terminal); otherwise
the command reads an empty one. While it runs, this process ignores the terminal's SIGINT
and SIGQUIT (the command gets them itself, as a shell's foreground job does) and passes
SIGTERM and SIGHUP on, so the command — not shipway — decides how to end.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType

from shipway.backends.local.environment import LocalEnvironment
from shipway.backends.oneoff import NOT_FOUND, NOT_RUNNABLE, exit_code_of_returncode
from shipway.backends.protocol import OneOffCommand, Reporter
from shipway.errors import BackendError
from shipway.guard import Clearance
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret


class LocalCommands(LocalEnvironment):
    """run_command."""

    def run_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        oneoff: OneOffCommand,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> int:
        d = self._guarded(clearance, target)
        self._secrets.update(secrets)
        where = self._environment(d, release, oneoff.process, secrets, oneoff.process)
        name = oneoff.command[0]
        try:
            proc = subprocess.Popen(
                list(oneoff.command),
                cwd=where.cwd,
                env={**where.env, **dict(oneoff.env)},
                stdin=None if oneoff.attached else subprocess.DEVNULL,
                preexec_fn=_ends_with_parent(),
            )
        except FileNotFoundError:
            reporter.line(f"{name}: command not found in r{release.revision} ({where.cwd})")
            return NOT_FOUND
        except PermissionError:
            reporter.line(f"{name}: permission denied in r{release.revision} ({where.cwd})")
            return NOT_RUNNABLE
        except OSError as exc:
            raise BackendError(f"cannot run {name!r}: {exc.strerror or exc}") from exc
        with _signals_to(proc):
            code = proc.wait()
        return exit_code_of_returncode(code)


#: prctl(2)'s PR_SET_PDEATHSIG: the signal a process gets when its parent dies
_PR_SET_PDEATHSIG = 1


def _ends_with_parent() -> Callable[[], None] | None:
    """What the one-off's process runs before the command: on Linux, it gets SIGTERM when
    the shipway that started it dies — even by ``kill -9``, when no ``finally`` runs — so
    no one-off outlives its shipway (elsewhere, nothing is asked). ``prctl`` is found here,
    in shipway's process, among the symbols it already has (libc's): the forked child only
    calls it (a look-up there ran ``ldconfig``, a process started between fork and exec)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def ask() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return ask


@contextlib.contextmanager
def _signals_to(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """While ``proc`` runs: the terminal's SIGINT/SIGQUIT are its own (ignored here),
    SIGTERM/SIGHUP are passed on to it. Outside the main thread nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, _: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    handlers: dict[signal.Signals, signal.Handlers | Callable[[int, FrameType | None], None]] = {
        signal.SIGINT: signal.SIG_IGN,
        signal.SIGQUIT: signal.SIG_IGN,
        signal.SIGTERM: forward,
        signal.SIGHUP: forward,
    }
    before = {s: signal.signal(s, h) for s, h in handlers.items()}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
