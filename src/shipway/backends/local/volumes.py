"""The slot's volumes on this machine: one directory per volume under
``<state>/<app>/<slot>/volumes/<name>/``, outside every snapshot, and a symlink at the
volume's path inside each snapshot, so every release (its processes, its release command)
reads and writes the same data.

What must never happen: a volume deleted by a deploy, rollback, restart, switch, ``stop``
or snapshot pruning (a snapshot's copy and digest skip the link, and deleting a snapshot
removes the link, never what it points at), or a link placed outside the snapshot (a path
through a symlink of the app's own is refused). Only :meth:`LocalVolumes._delete_volumes`,
which ``destroy --volumes`` calls, deletes one.

All processes of a release share one snapshot, so on this backend every process reaches
every volume; ``processes = [...]`` decides which Docker hosts and Kubernetes pods get it.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from shipway.backends.local.dirs import SlotDirs, private_dir
from shipway.backends.local.render import volume_unit
from shipway.backends.local.state import LocalState
from shipway.backends.protocol import Leftover, Reporter
from shipway.backends.volume_status import VolumeStatus, human_bytes
from shipway.errors import BackendError
from shipway.plan.model import ObservedUnit, Plan
from shipway.release.artifact import Unit
from shipway.spec.model import App, Slot, Target


def disk_usage(path: Path) -> int:
    """Bytes ``path`` takes on disk, as ``du`` counts them: allocated blocks, every inode
    once, symlinks not followed, unreadable entries skipped."""
    total, seen = 0, set()
    stack = [path]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
            if stat.S_ISDIR(st.st_mode):
                stack.append(Path(entry.path))
    return total


class LocalVolumes(LocalState):
    """Volume directories made, placed in snapshots, observed, listed, and deleted."""

    def _apply_volume(self, d: SlotDirs, unit: Unit, reporter: Reporter) -> None:
        name = str(unit.body["name"])
        private_dir(d.base)
        path = d.volume(name)
        made = not path.is_dir()
        private_dir(path)
        reporter.line(f"  volume {name}: {path} ({'created' if made else 'kept'})")

    def _observe_volumes(self, d: SlotDirs) -> list[ObservedUnit]:
        """A volume is its directory: its unit's body is its name, so its digest is known."""
        return [
            ObservedUnit(key=unit.key, kind="volume", digest=unit.digest, phase=0)
            for unit in (volume_unit(name) for name in self._volume_names(d))
        ]

    def _volume_names(self, d: SlotDirs) -> list[str]:
        try:
            return sorted(p.name for p in d.volumes.iterdir() if p.is_dir())
        except OSError:
            return []

    def _place_volumes(
        self, d: SlotDirs, snapshot: Path, volumes: tuple[tuple[str, str], ...]
    ) -> None:
        """Each volume's symlink at its path inside ``snapshot`` (made, or made again)."""
        for name, rel in volumes:
            link = snapshot / rel
            parent = snapshot
            for part in Path(rel).parent.parts:
                parent = parent / part
                if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
                    raise BackendError(
                        f"volume {name}: {rel} leads through {parent.relative_to(snapshot)}, "
                        "which is not a directory of the app (a symlink or a file), so the "
                        "volume would be placed outside the release (hint: give the volume "
                        "a path through real directories)"
                    )
                parent.mkdir(exist_ok=True)
            target = private_dir(d.volume(name))
            if link.is_symlink() and Path(os.readlink(link)) == target:
                continue
            if link.exists() and not link.is_symlink():
                raise BackendError(
                    f"volume {name}: {rel} already exists in snapshot {snapshot.name} "
                    "(hint: the volume's path must not be one of the app's own files)"
                )
            fd, tmp = tempfile.mkstemp(prefix=f".{link.name}.", dir=link.parent)
            os.close(fd)
            os.unlink(tmp)
            os.symlink(target, tmp)
            os.replace(tmp, link)

    # -- the protocol's Volumes ----------------------------------------------------------

    def volume_notes(self, app: App, slot: Slot, plan: Plan) -> list[str]:
        """Nothing to caveat: a directory serves old and new processes at once."""
        return []

    def volumes(self, target: Target) -> list[VolumeStatus]:
        d = self.dirs(target)
        declared = set(self.app.volumes)
        out = []
        for name in sorted(declared | set(self._volume_names(d))):
            path = d.volume(name)
            there = path.is_dir()
            out.append(
                VolumeStatus(
                    name=name,
                    where=str(path),
                    state="present" if there else "not created yet",
                    size_bytes=disk_usage(path) if there else None,
                    declared=name in declared,
                )
            )
        return out

    def _volume_leftovers(self, d: SlotDirs) -> list[Leftover]:
        return [
            Leftover(
                "volume",
                f"{name} ({d.volume(name)}, {human_bytes(disk_usage(d.volume(name)))})",
                data=True,
            )
            for name in self._volume_names(d)
        ]

    def _delete_volumes(self, d: SlotDirs, reporter: Reporter) -> list[Leftover]:
        """``destroy --volumes`` only: the data goes — what lies in the slot's directory.
        A volume directory (or the ``volumes`` directory itself) that is a symlink is
        removed as a link only: what it points to is outside the slot's directory, never
        deleted through it (it is said, with where it points)."""
        gone = self._volume_leftovers(d)
        if d.volumes.is_symlink():
            _unlink_only(d.volumes, "volumes", reporter)
            return gone
        try:
            entries = sorted(d.volumes.iterdir())
        except FileNotFoundError:
            return gone
        for path in entries:
            if path.is_symlink():
                _unlink_only(path, f"volume {path.name}", reporter)
            elif path.is_dir():
                shutil.rmtree(path)
                reporter.line(f"  deleted volume {path.name} ({path})")
            else:
                path.unlink()
        d.volumes.rmdir()
        return gone


def _unlink_only(link: Path, what: str, reporter: Reporter) -> None:
    """Remove a symlink of the slot's directory, never what it points to."""
    points_to = os.readlink(link)
    link.unlink()
    reporter.line(
        f"  removed {what} ({link}): a symlink to {points_to}, outside the slot's directory; "
        "the link only was removed, what it points to is left as it is (delete it yourself "
        "if it is no longer wanted)"
    )
