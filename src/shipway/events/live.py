"""Every operation's events, kept on this machine while it runs: the stream the dashboard's
live view reads, with nothing for anyone to set.

The command line always adds a :class:`LiveFile` to the sink it builds for an operation
(cli/common.py ``reporter_of``). At the operation's ``started`` event it makes one file::

    <state>/_events/<app>.<slot>.<UTC stamp>.<pid>-<n>.jsonl    (0600; the directory 0700)

``<state>`` is this machine's shipway state directory (``$SHIPWAY_STATE_DIR``, else
``$XDG_STATE_HOME/shipway``, else ``~/.local/state/shipway``) whatever the slot's backend:
a Kubernetes or Docker deploy started here is seen as a local one is. ``_events`` cannot be
an app's directory (an app's name is a DNS label, with no ``_``). Each event is one line of
JSON (the event's JSON form, as ``SHIPWAY_EVENTS`` has it), appended as it happens; the
events said before ``started`` (a recovery line) are kept and written first. A wait's
report that only repeats its last one (same counts, same probe result) is written once
every :data:`REPEAT_EVERY` seconds, not on every probe.

Kept for a bounded time and count: when an operation ends, the files of operations that
are over (their ``ended`` written, or their process gone) beyond the newest
:data:`KEEP_FINISHED`, and any older than :data:`KEEP_FOR`, are deleted. A running
operation's file is never deleted.

Never fails the operation: a state directory that cannot be written (a full disk, a
read-only home) turns the file off for the rest of the operation, silently — the dashboard
then misses it, the deploy does not. Events hold no secret value (events/model.py), so
neither does a file.
"""

from __future__ import annotations

import calendar
import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shipway.events.model import Ended, Event, Started, Waiting
from shipway.events.sink import event_line

#: finished operations' files kept, newest first (every slot together)
KEEP_FINISHED = 50
#: a finished operation's file is deleted once it is older than this (seconds): one day
KEEP_FOR = 24 * 3600.0
#: events said before ``started`` kept for its file (more are dropped, oldest first)
EARLY = 200
#: a wait's report that repeats the last one for its process is written at most this often
#: (seconds): a wait reports on every probe, the file keeps what changes and a heartbeat
REPEAT_EVERY = 5.0
SUFFIX = ".jsonl"


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """This machine's shipway state directory: ``$SHIPWAY_STATE_DIR``, else
    ``$XDG_STATE_HOME/shipway``, else ``~/.local/state/shipway``. Pure."""
    env = os.environ if environ is None else environ
    if env.get("SHIPWAY_STATE_DIR"):
        return Path(os.path.expanduser(env["SHIPWAY_STATE_DIR"])).resolve()
    xdg = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(xdg).resolve() / "shipway"


def live_dir(state_dir: Path | None = None) -> Path:
    """Where the operations' event files are kept under ``state_dir`` (default: this
    machine's)."""
    return (state_dir or default_state_dir()) / "_events"


@dataclass(frozen=True)
class OpFile:
    """One operation's file, known by its name: app, slot, when it started, and the
    process that writes it."""

    path: Path
    app: str
    slot: str
    stamp: str
    pid: int

    @property
    def op(self) -> str:
        """The operation's id: its file's name without the suffix."""
        return self.path.name[: -len(SUFFIX)]

    @classmethod
    def parse(cls, path: Path) -> OpFile | None:
        parts = path.name.removesuffix(SUFFIX).split(".")
        if not path.name.endswith(SUFFIX) or len(parts) != 4:
            return None
        app, slot, stamp, writer = parts
        try:
            pid = int(writer.split("-", 1)[0])
        except ValueError:
            return None
        return cls(path, app, slot, stamp, pid)

    def writer_alive(self) -> bool:
        """Whether the process that writes it still runs: its pid is alive and that process
        began before the file was made (a pid reused by a later process, after a kill -9,
        is not its writer; known on Linux, from ``/proc``)."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        began = process_began(self.pid)
        try:
            made = calendar.timegm(time.strptime(self.stamp[:15], "%Y%m%dT%H%M%S"))
        except ValueError:
            return True
        return began is None or began <= made + 2  # /proc's boot time: whole seconds

    def ended(self) -> bool:
        """Whether its last line is the operation's ``ended`` event."""
        try:
            with open(self.path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 65536))
                tail = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        except OSError:
            return False
        try:
            return bool(json.loads(tail).get("event") == Ended.kind)
        except (ValueError, AttributeError):
            return False

    def over(self) -> bool:
        """Whether the operation is over: ended, or its process gone without ending."""
        return self.ended() or not self.writer_alive()


def process_began(pid: int) -> float | None:
    """When process ``pid`` began (seconds since the epoch), or None where ``/proc`` does
    not say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def op_files(directory: Path) -> list[OpFile]:
    """Every operation's file in ``directory``, oldest first (none: no directory)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    found = (OpFile.parse(directory / name) for name in names)
    return sorted((f for f in found if f is not None), key=lambda f: (f.stamp, f.op))


def prune(
    directory: Path,
    keep: int = KEEP_FINISHED,
    keep_for: float = KEEP_FOR,
    now: float | None = None,
) -> list[Path]:
    """Delete the files of finished operations beyond the newest ``keep`` and those older
    than ``keep_for`` seconds (by their last write); never a running one's. Returns what
    was deleted."""
    now = time.time() if now is None else now
    finished = [f for f in op_files(directory) if f.over()]
    gone: list[Path] = []
    for rank, f in enumerate(reversed(finished)):
        try:
            old = now - f.path.stat().st_mtime > keep_for
        except OSError:
            continue
        if rank >= keep or old:
            try:
                f.path.unlink()
            except OSError:
                continue
            gone.append(f.path)
    return gone


class LiveFile:
    """A sink writing each operation's events to a file of its own under ``directory``
    (:func:`live_dir`), from its ``started`` to its ``ended``; when one ends, the files of
    finished operations are pruned (:func:`prune`)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or live_dir()
        self.path: Path | None = None
        self._fd: int | None = None
        self._early: list[Event] = []
        self._count = 0
        self._broken = False
        self._lock = threading.Lock()
        #: each process's last wait report written: (counts, note), when
        self._waits: dict[str, tuple[object, float]] = {}

    def emit(self, event: Event) -> None:
        with self._lock:
            if self._broken:
                return
            try:
                self._emit(event)
            except OSError:
                self._broken = True  # never fails the operation (module docstring)
                self._close()

    def _emit(self, event: Event) -> None:
        if isinstance(event, Started):
            self._close()
            self._open(event)
            for early in self._early:
                os.write(self._fd, event_line(early))  # type: ignore[arg-type]
            self._early = []
        if self._fd is None:
            self._early = [*self._early[-(EARLY - 1) :], event]
            return
        if isinstance(event, Waiting) and self._repeats(event):
            return
        os.write(self._fd, event_line(event))
        if isinstance(event, Ended):
            self._close()
            prune(self.directory)

    def _repeats(self, wait: Waiting) -> bool:
        """Whether ``wait`` says what its process's last report said, not long ago."""
        said = (dict(wait.counts), wait.note)
        last = self._waits.get(wait.process)
        now = time.monotonic()
        if last is not None and last[0] == said and now - last[1] < REPEAT_EVERY:
            return True
        self._waits[wait.process] = (said, now)
        return False

    def _open(self, started: Started) -> None:
        self._waits = {}
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self._count += 1
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{int(now % 1 * 1e6):06d}"
        name = f"{started.app}.{started.slot}.{stamp}.{os.getpid()}-{self._count}"
        self.path = self.directory / f"{name}{SUFFIX}"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
