"""An accessory's backup (``shipway backup``) and putting one back (``shipway restore``).

A backup is a read: the server keeps serving, no lock is taken, nothing in the slot
changes; the file is written under a partial name and renamed once its checksum is beside
it (:mod:`shipway.backends.backups`), and an existing file is never overwritten. A restore
replaces the accessory's whole data, so it is guarded like ``destroy``: a clearance for
exactly this slot with its name typed back on every slot, then the file's checksum and kind
checked (a corrupted or foreign file is refused, exit 2, before the lock is taken or anything
is touched), then the backend puts it back under the slot's lock.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipway.backends.accessories import backups_of
from shipway.backends.backups import (
    BackupFile,
    default_name,
    partial_path,
    seal,
    verified,
)
from shipway.backends.protocol import LockHolder
from shipway.engine.done import Done
from shipway.engine.signals import signals_raise
from shipway.engine.telling import Telling
from shipway.errors import ConfirmationRequired, InputError
from shipway.guard import Clearance
from shipway.spec.accessories import Accessory
from shipway.spec.model import App


@dataclass(frozen=True)
class Restored:
    """A backup put back into an accessory."""

    target: str
    accessory: str
    path: Path
    sha256: str
    seconds: float
    said: str

    def line(self) -> str:
        return f"{self.said} in {self.target} ({self.seconds:.1f}s; sha256 checked)"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "accessory": self.accessory,
            "path": str(self.path),
            "sha256": self.sha256,
            "seconds": round(self.seconds, 3),
            "line": self.said,
        }


class Backups(Telling):
    """``backup`` and ``restore`` of the slot's accessories."""

    def backup(
        self, app: App, slot_name: str, name: str, out: Path | None = None
    ) -> BackupFile:
        """Write a consistent backup of accessory ``name`` to ``out`` (a file, or a
        directory it goes in; default: the current directory), its sha256 beside it."""
        target = app.slots.target(slot_name)
        accessory = declared(app, name)
        part = backups_of(self.backend)
        path = _backup_path(out, default_name(app.name, slot_name, name, accessory.kind))
        partial = partial_path(path)
        self.reporter.line(f"backing up accessory {accessory.describe()} of {target} to {path}")
        started = time.monotonic()
        try:
            version, made_by = part.backup_accessory(target, accessory, partial, self.reporter)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        digest, size = seal(partial, path)
        return BackupFile(
            accessory=name,
            kind=accessory.kind,
            server_version=version,
            path=path,
            size_bytes=size,
            sha256=digest,
            seconds=time.monotonic() - started,
            made_by=made_by,
        )

    def restore(
        self, clearance: Clearance, app: App, slot_name: str, name: str, source: Path
    ) -> Restored:
        """Make the backup ``source`` accessory ``name``'s whole data, once its checksum
        matches the one beside it; needs the slot's name typed back on every slot."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        if not clearance.confirmed:
            raise ConfirmationRequired(
                f"restore replaces all of accessory {name}'s data in {target}: confirm by "
                f"passing --confirm {slot_name}; nothing was restored"
            )
        accessory = declared(app, name)
        part = backups_of(self.backend)
        digest = verified(source, accessory.kind, name)
        self.reporter.line(f"{source}: sha256 matches {source.name}.sha256")
        started = time.monotonic()
        holder = LockHolder.me(self.lock_ttl)
        what = f"restore accessory {name} from {source.name}"
        with (
            signals_raise(),
            self.backend.lock(clearance, target, holder, self.reporter),
            self._telling(clearance, target, app, "restore", what),
        ):
            said = part.restore_accessory(clearance, target, accessory, source, self.reporter)
            done = Restored(str(target), name, source, digest, time.monotonic() - started, said)
            self._done(Done("restore", str(target), done.line(), done.to_json()))
            return done


def declared(app: App, name: str) -> Accessory:
    """The accessory the spec declares by ``name``, or an InputError naming those it does."""
    found = app.accessories.get(name)
    if found is None:
        have = ", ".join(app.accessories) or "none"
        raise InputError(
            f"{app.spec_file.name} declares no accessory {name!r} (accessories: {have})"
        )
    if found.kind == "custom":
        raise InputError(
            f"accessory {name} is one of your own (command or image): shipway does not know "
            "how to back it up (hint: use its own tools)"
        )
    return found


def _backup_path(out: Path | None, name: str) -> Path:
    """Where the backup goes: ``out`` itself, or ``name`` in it when it is a directory (the
    current one by default; a second backup within the same second is ``<name>-2``). An
    existing file is never overwritten: a file ``out`` names that exists is refused."""
    if out is None or out.is_dir():
        directory = out if out is not None else Path.cwd()
        stem, suffix = os.path.splitext(name)
        path, n = directory / name, 2
        while path.exists():
            path, n = directory / f"{stem}-{n}{suffix}", n + 1
        return path.absolute()
    path = out
    if path.exists():
        raise InputError(
            f"{path} exists: a backup never overwrites a file (hint: --out another file, or "
            "a directory)"
        )
    if not path.parent.is_dir():
        raise InputError(f"--out {out}: directory {path.parent} does not exist")
    return path.absolute()
