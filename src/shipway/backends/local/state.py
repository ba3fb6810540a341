"""The typed state of a local backend, shared by all its parts (:mod:`.backend` assembles
them): the app and slot it serves, the state directory, supervisord, the port table, the
secrets it was given — and the preamble every operation passes (:class:`.guarded.Guarded`).

Only reads and plumbing live here: which files hold a slot's records (:mod:`.dirs`,
:mod:`.records`), which snapshot a release runs in, which secret values to mask. No method
here starts, stops or writes anything.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from shipway.backends.appfiles import AppFiles
from shipway.backends.guarded import Guarded
from shipway.backends.local import dependencies, snapshot
from shipway.backends.local.dirs import (
    SlotDirs,
    check_state_root,
    read_records_file,
    router_port,
    state_root,
)
from shipway.backends.local.generations import read_generations
from shipway.backends.local.masks import read_masks
from shipway.backends.local.ports import PortTable, ephemeral_start, owner_prefix, port_span
from shipway.backends.local.records import (
    EnvFile,
    ProgramRecord,
    read_current_snapshot,
    read_programs,
)
from shipway.backends.local.render import ProgramBody, excluded_paths
from shipway.backends.local.router_control import RouterControl
from shipway.backends.local.supervisor import INHERITED_ENV, Supervisor
from shipway.backends.protocol import Reporter
from shipway.backends.retry import RetryPolicy
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.release import codec
from shipway.release.model import Release
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Masker, Secret, resolve_all, reveal

if TYPE_CHECKING:  # lock.py builds on this module
    from shipway.backends.local.lock import HeldLock

KEEP_SNAPSHOTS = 5
DRAIN_TIMEOUT = 30.0
LOG_TAIL = 12
LAUNCHER = Path(__file__).with_name("launch.py")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def now_precise() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class LocalState(Guarded):
    """What every part of the local backend knows and reads."""

    name = "local"

    def __init__(self, app: App, slot: Slot, environ: Mapping[str, str] | None = None) -> None:
        self.app = app
        self.slot = slot
        self.environ = dict(os.environ if environ is None else environ)
        self.root = state_root(slot, app.source_dir, self.environ)
        check_state_root(self.root, slot, self.environ)
        self.router_port = router_port(slot, self.environ)
        #: how supervisord's calls are tried again (:mod:`.supervisor`)
        self.retry = RetryPolicy()
        self.supervisor = Supervisor(self.root / "supervisor", self.retry)
        self.ports = PortTable(
            self.root,
            reserved=(self.router_port,),
            span=port_span(self.environ, ephemeral_start()),
        )
        self._secrets: dict[str, Secret] = {}
        self._held_lock: HeldLock | None = None  # while :meth:`.LocalLock.lock` holds it

    def report_retries(self, reporter: Reporter) -> None:
        self.retry.reporter = reporter

    def _lock_problem(self) -> str | None:
        """The slot's lock file was deleted or replaced while this backend held it."""
        return self._held_lock.problem() if self._held_lock is not None else None

    def dirs(self, target: Target) -> SlotDirs:
        """The files of the slot a read is about (refused: another app's or slot's)."""
        self._serves(target)
        return SlotDirs.of(self.root, target)

    def _guarded(self, clearance: Clearance, target: Target) -> SlotDirs:
        """Before every mutation (:meth:`.Guarded._guard`): the clearance covers exactly
        this target, it is the slot this backend serves, the lock held is still ours."""
        self._guard(clearance, target)
        return SlotDirs.of(self.root, target)

    def router(self, port: int) -> RouterControl:
        return RouterControl(self.root, port, self.supervisor)

    def close(self) -> None:
        """Nothing stays open between calls: supervisord and the router are their own
        processes, and every file is closed after use."""

    def _instance_prefix(self, target: Target) -> str:
        return owner_prefix(target.app, target.slot)

    def _records(self, d: SlotDirs) -> list[Release]:
        """The slot's release records, oldest first."""
        return [codec.from_json(r) for r in read_records_file(d.records)]

    def _secret_values(self, d: SlotDirs) -> list[str]:
        """Every secret value this slot's processes were given (to mask them in output)."""
        values = {s.reveal() for s in self._secrets.values()}
        for rec in read_programs(d).values():
            for path in rec.env_files():
                with contextlib.suppress(BackendError):
                    env = EnvFile.read(path)
                    values.update(env.secret_values() if env else ())
        with contextlib.suppress(BackendError, InputError):
            values.update(s.reveal() for s in resolve_all(self.app.secrets, self.environ).values())
        return sorted(values)

    def _redactor(self, d: SlotDirs) -> Masker:
        """The values this slot's processes were given, and those of processes gone whose
        logs are kept (remembered as salted digests: :mod:`.masks`)."""
        salt, hashed = read_masks(d)
        return Masker(self._secret_values(d), hashed, salt)

    def _base_env(self) -> dict[str, str]:
        return {k: self.environ[k] for k in INHERITED_ENV if k in self.environ}

    def _env_file(self, body: ProgramBody, secrets: Mapping[str, Secret]) -> EnvFile:
        """The environment a program runs with: what it inherits, its env, secrets revealed,
        and its release's dependency environment first on PATH."""
        env = {**self._base_env(), **reveal(dict(body.env), secrets)}
        if body.environment:
            env.update(dependencies.variables(Path(body.environment), env.get("PATH", "")))
        return EnvFile.of(env, secrets)

    def _app_files(self, app: App, source: Path, placed: Iterable[str] | None = None) -> AppFiles:
        """What of ``source`` a snapshot holds (the one rule, :mod:`..appfiles`): never this
        state directory (nor a symlink into it: a volume placed in a kept snapshot), a
        secret file, ``.env``, …; nor what each snapshot gets placed in it (default: the
        app's config files and the places of its volumes); nor the spec file itself: what
        it declares is the release's own record (its changes are told as such), so editing
        the spec alone never counts as a change of the source."""
        own = excluded_paths(app) if placed is None else list(placed)
        try:
            spec = [app.spec_file.resolve().relative_to(app.source_dir.resolve()).as_posix()]
        except ValueError:
            spec = []  # a spec outside the app's directory: never part of it anyway
        return AppFiles.of(app, source, also=[self.root, *own, *spec])

    def _local_roots(self, app: App) -> list[tuple[Path, str]]:
        """(state root, slot) of every local slot of the app: where snapshots may be kept."""
        out = []
        for slot in app.slots:
            if slot.backend == "local":
                out.append((state_root(slot, app.source_dir, self.environ), slot.name))
        return out

    def _find_snapshot(self, app: App, digest: str) -> Path | None:
        """A kept snapshot with ``digest``, in this slot first, then in the app's others."""
        mine = (self.root, self.slot.name)
        roots = [mine] + [r for r in self._local_roots(app) if r != mine]
        return snapshot.find((root / app.name / slot / "releases" for root, slot in roots), digest)

    def _snapshots_in_use(self, d: SlotDirs) -> set[str]:
        """Snapshot directories something still needs: a program (running or asleep), the
        rolling slot's current one, every kept generation's own."""
        in_use = {rec.snapshot.name for rec in read_programs(d).values()}
        current = read_current_snapshot(d)
        if current and current.dir:
            in_use.add(current.dir)
        in_use.update(g.dir for g in read_generations(d).values() if g.dir)
        return in_use

    def _generation_snapshot(self, d: SlotDirs, generation: str) -> Path:
        meta = read_generations(d).get(generation)
        path = d.releases / meta.dir if meta and meta.dir else None
        if path is None or not path.is_dir():
            raise BackendError(
                f"generation {generation} has no snapshot in {d.releases} "
                "(hint: shipway gens SLOT; deploy again)"
            )
        return path

    def _snapshot_dir(self, d: SlotDirs, digest: str) -> Path:
        current = read_current_snapshot(d)
        if current and current.dir and current.digest == digest:
            path = d.releases / current.dir
            if path.is_dir():
                return path
        found = snapshot.find([d.releases], digest)
        if found is None:
            raise BackendError(
                f"no snapshot with digest {digest} in {d.releases} (hint: deploy again)"
            )
        return found

    def _generation_programs(
        self, d: SlotDirs, generation: str, process: str | None = None
    ) -> list[tuple[str, ProgramRecord]]:
        """The programs of a generation (of one process), newest first: a targeted restart
        leaves two of a process for a moment, and the newest is the one to scale or route."""
        found = [
            (key, rec)
            for key, rec in read_programs(d).items()
            if rec.generation == generation and process in (None, rec.process)
        ]
        return sorted(found, key=lambda kv: (kv[1].created_at, kv[0]), reverse=True)
