"""The slot's lock: a file whose ``flock`` the deploying process holds, with the holder
written inside so a refused deploy can name it.

Why flock: the kernel drops it the instant the holder dies, ``kill -9`` included, so a
dead deploy can never leave the slot stuck, and a live one is never broken (no clock, no
expiry to guess). The holder record left behind by a process that died while holding the
lock is how the next one knows it broke a lock, and whose — it says so in a line.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipway.backends.local.dirs import private_dir, writing
from shipway.backends.local.state import LocalState
from shipway.backends.protocol import LockHolder, Reporter, pid_alive
from shipway.errors import BackendError, SlotLocked
from shipway.guard import Clearance
from shipway.spec.model import Target


def _read_holder(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    if not raw.strip():
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return {"holder": "an unknown holder (unreadable lock file)"}
    return doc if isinstance(doc, dict) else None


@dataclass(frozen=True)
class HeldLock:
    """The lock file this process holds the flock of, open as ``fd``."""

    path: Path
    fd: int

    def problem(self) -> str | None:
        """Why it is no longer ours (None: it is). An flock is never taken from a live
        holder, but the file can be deleted or replaced under it — and then another deploy
        can lock the new file at that path while this one still holds the old one."""
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return f"its lock file {self.path} was deleted"
        except OSError as exc:
            return f"its lock file {self.path} cannot be read ({exc.strerror or exc})"
        held = os.fstat(self.fd)
        if (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino):
            return f"its lock file {self.path} was replaced by another file"
        return None


@contextlib.contextmanager
def slot_lock(path: Path, slot: str, holder: LockHolder, reporter: Reporter) -> Iterator[HeldLock]:
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise BackendError(f"cannot lock {path}: {exc}") from exc
            # The holder writes its record right after taking the lock: give it a moment.
            current = None
            for _ in range(20):
                current = _read_holder(fd)
                if current:
                    break
                time.sleep(0.01)
            current = current or {}
            raise SlotLocked(
                slot,
                str(current.get("holder", "another process")),
                str(current.get("since", "an unknown time")),
            ) from None
        left = _read_holder(fd)
        if left:
            pid = left.get("pid")
            alive = isinstance(pid, int) and pid_alive(pid)
            why = (
                "that process is no longer running"
                if not alive
                else "its process no longer holds it"
            )
            reporter.line(
                f"broke the lock of slot {slot!r} held by {left.get('holder', 'unknown')} "
                f"since {left.get('since', 'an unknown time')}: {why}"
            )
        record = json.dumps({**holder.to_json(), "lock": "flock"}).encode()
        with writing(path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
            os.fsync(fd)
        try:
            yield HeldLock(path, fd)
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


class LocalLock(LocalState):
    """The slot's lock (the protocol's Locks), held for the whole operation; while it is
    held, every mutation checks it is still ours (:meth:`.LocalState._lock_problem`)."""

    @contextlib.contextmanager
    def lock(
        self, clearance: Clearance, target: Target, holder: LockHolder, reporter: Reporter
    ) -> Iterator[None]:
        d = self._guarded(clearance, target)
        private_dir(self.root)
        private_dir(d.base)
        with slot_lock(d.lock, target.slot, holder, reporter) as held:
            self._held_lock = held
            try:
                yield
            finally:
                self._held_lock = None
