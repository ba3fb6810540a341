"""``destroy`` on this machine: what runs is stopped (drained first, as ``stop`` does), then
the slot's files go — its router tables, ports, snapshots, dependency environments, env
files, logs, secret marks, records — and
its lock file last, while it is still held. The volumes' directories stay unless asked.

What must never happen: another slot's or app's files touched (everything deleted is under
the slot's own directory, or named with its ``<app>.<slot>`` prefix), or a volume deleted
without ``volumes``.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from shipway.backends.local import snapshot
from shipway.backends.local.accessories import LocalAccessories
from shipway.backends.local.dirs import SlotDirs
from shipway.backends.local.generations import read_generations
from shipway.backends.local.ports import owner_prefix
from shipway.backends.local.records import read_programs, read_routes
from shipway.backends.local.steps import LocalSteps
from shipway.backends.local.volumes import LocalVolumes
from shipway.backends.protocol import Leftover, Reporter
from shipway.guard import Clearance
from shipway.spec.model import Target

#: what the slot's directory holds besides its volumes and lock (deleted by destroy)
_FILES = (
    "records.json.gz",
    "snapshot.json",
    "programs.json",
    "routes.json",
    "generations.json",
    "claims.json",
    "masks.json",
)
_DIRS = ("releases", "run", "logs", "envs")


class LocalDestroy(LocalSteps, LocalVolumes, LocalAccessories):
    """The protocol's Destroys."""

    def leftovers(self, target: Target) -> list[Leftover]:
        d = self.dirs(target)
        if not d.base.is_dir():
            return []
        out = [
            Leftover("program", f"{key} ({rec.release}, {len(rec.instances)} instance(s))")
            for key, rec in sorted(read_programs(d).items())
        ]
        out += [
            Leftover("route", f"http://{host}:{r.router_port}/")
            for host, r in sorted(read_routes(d).items())
        ]
        out += [Leftover("generation", name) for name in sorted(read_generations(d))]
        out += [Leftover("snapshot", str(path)) for _, path in snapshot.kept(d.releases)]
        revisions = sorted(r.revision for r in self._records(d))
        if revisions:
            span = (
                f"r{revisions[0]}..r{revisions[-1]}" if len(revisions) > 1 else f"r{revisions[0]}"
            )
            out.append(Leftover("release records", f"{len(revisions)}, {span} ({d.records})"))
        out += [
            Leftover("files", str(d.base / name))
            for name in ("run", "logs", "envs")
            if (d.base / name).exists()
        ]
        if d.lock.exists():
            out.append(Leftover("lock", str(d.lock)))
        return out + self._volume_leftovers(d) + self._accessory_leftovers(d)

    def destroy(
        self, clearance: Clearance, target: Target, volumes: bool, reporter: Reporter
    ) -> list[Leftover]:
        d = self._guarded(clearance, target)
        found = self.leftovers(target)
        self.stop(clearance, target, reporter)
        self._guarded(clearance, target)  # still ours, before any file goes
        self._destroy_accessories(d, target, volumes, reporter)
        self._forget_tables(d)
        self.ports.rebuild(owner_prefix(target.app, target.slot), {})
        for name in _FILES:
            with contextlib.suppress(FileNotFoundError):
                (d.base / name).unlink()
        for name in _DIRS:
            shutil.rmtree(d.base / name, ignore_errors=True)
        if volumes:
            self._delete_volumes(d, reporter)
        with contextlib.suppress(FileNotFoundError):
            d.lock.unlink()  # last: held until here, so no deploy ran beside this
        for gone in (d.base, d.base.parent):
            with contextlib.suppress(OSError):  # not empty: its volumes, another slot
                gone.rmdir()
        reporter.line(f"  deleted {d.base} (its {'' if volumes else 'non-volume '}contents)")
        return [item for item in found if volumes or not item.data]

    def _forget_tables(self, d: SlotDirs) -> None:
        """The slot's router table files, on every router of this state dir (``stop`` left
        them empty); a router reads a missing table as no hosts."""
        for tables in (self.root / "router").glob("*/tables"):
            for path in [
                tables / f"{d.app}.{d.slot}.json",
                *tables.glob(f"{d.app}.{d.slot}@*.json"),
            ]:
                with contextlib.suppress(FileNotFoundError):
                    Path(path).unlink()
