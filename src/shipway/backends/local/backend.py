"""The local backend: a release runs as supervised OS processes behind an HTTP router.

It does one step at a time when the engine asks (the engine decides what and when):

* ``snapshot``: copy the source (verified against its digest) into ``releases/r<N>``,
  write the config files, prune old snapshots (the last ``KEEP_SNAPSHOTS`` are kept).
* ``program``: hand out fresh ports, write each instance's env file (0600: secrets live
  there, never in a command line), add the instances to supervisord; the health gate is
  ``wait``; removing one drains it through the router first, then stops it.
* ``route``: point a host at a program in the router's table and reload it atomically.

A blue-green slot keeps *generations* (:mod:`.generations`): each release is a snapshot and
programs labelled with its generation, started beside the live one. ``scale`` starts or
stops a generation's instances (asleep = no instance, records kept), ``wait_replicas`` is
the health gate, ``point_host`` adds the generation's claim of a host to the router (the
newest claim wins: one atomic switch) and ``drop_host`` removes the old generation's claim
(best effort: a stale claim loses anyway). Stopping instances always drains them first.

What must never happen, and where it is prevented:
  * a half-written state file — every write is a rename (:mod:`.dirs`);
  * a slot stuck behind a dead deploy — the lock is an flock (:mod:`.lock`);
  * a dropped request on a switch — routes move atomically and old programs are drained
    before they stop (:mod:`.router`); a generation serving a host is never put to sleep;
  * a snapshot pruned under a generation that may wake again — every kept generation's
    snapshot is in use until ``gc`` deletes the generation;
  * a secret value in output — env files and config files are the only places values are
    written; log lines shown to the user are redacted;
  * a subprocess from ``plan``/``status``/``observe`` — reads never start supervisord or
    the router, they report what is (not) running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from shipway.backends.local import health, logfiles, render, snapshot
from shipway.backends.local.dirs import (
    SlotDirs,
    private_dir,
    read_records_file,
    router_port,
    state_root,
    write_atomic,
    write_records_file,
)
from shipway.backends.local.gate import FailureOf, health_gate
from shipway.backends.local.generations import (
    Generation,
    claimed_ports,
    live_generation,
    read_claims,
    read_generations,
    serving,
    write_claims,
    write_generations,
)
from shipway.backends.local.launch import expand
from shipway.backends.local.lock import slot_lock
from shipway.backends.local.model import (
    EnvFile,
    Instance,
    ProgramRecord,
    Route,
    SnapshotRecord,
    read_current_snapshot,
    read_programs,
    read_routes,
    write_current_snapshot,
    write_programs,
    write_routes,
)
from shipway.backends.local.ports import PortTable, owner_prefix
from shipway.backends.local.render import ProgramBody, RouteBody, SnapshotBody
from shipway.backends.local.routing import RouterControl
from shipway.backends.local.supervisor import (
    INHERITED_ENV,
    RUNNING_STATES,
    Supervisor,
    program_conf,
    state_of,
)
from shipway.backends.protocol import (
    Failure,
    GenerationBackend,
    GenerationInfo,
    HostOwner,
    LockHolder,
    ProcessStatus,
    Reason,
    Reporter,
    ResolvedImage,
)
from shipway.errors import BackendError, CleanupFailed, InputError, RecordError
from shipway.guard import Clearance
from shipway.plan.model import (
    ApplyObject,
    DropHost,
    Observed,
    ObservedUnit,
    Plan,
    PointHost,
    Remove,
    Scale,
    UnitState,
    WaitReplicas,
    WaitRollout,
)
from shipway.release import codec, history
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import ImageMeta, Release
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Masker, Secret, resolve_all, reveal

KEEP_SNAPSHOTS = 5
DRAIN_TIMEOUT = 30.0
LOG_TAIL = 12
LAUNCHER = Path(__file__).with_name("launch.py")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _now_precise() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _human(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


class LocalBackend:
    name = "local"

    def __init__(self, app: App, slot: Slot, environ: Mapping[str, str] | None = None) -> None:
        self.app = app
        self.slot = slot
        self.environ = dict(os.environ if environ is None else environ)
        self.root = state_root(slot, app.source_dir, self.environ)
        self.router_port = router_port(slot, self.environ)
        self.supervisor = Supervisor(self.root / "supervisor")
        self.ports = PortTable(self.root, reserved=(self.router_port,))
        self._secrets: dict[str, Secret] = {}

    # -- helpers -----------------------------------------------------------------------

    def dirs(self, target: Target) -> SlotDirs:
        if target.app != self.app.name:
            raise BackendError(f"this backend serves app {self.app.name}, not {target.app}")
        return SlotDirs.of(self.root, target)

    def router(self, port: int) -> RouterControl:
        return RouterControl(self.root, port, self.supervisor)

    def _instance_prefix(self, target: Target) -> str:
        return owner_prefix(target.app, target.slot)

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
        return Masker(self._secret_values(d))

    def _base_env(self) -> dict[str, str]:
        return {k: self.environ[k] for k in INHERITED_ENV if k in self.environ}

    def _env_file(self, body: ProgramBody, secrets: Mapping[str, Secret]) -> EnvFile:
        """The environment a program runs with: what it inherits, its env, secrets revealed."""
        env = {**self._base_env(), **reveal(dict(body.env), secrets)}
        return EnvFile.of(env, secrets)

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

    # -- pure ----------------------------------------------------------------------------

    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        port = self.router_port if slot.name == self.slot.name else router_port(slot, self.environ)
        return render.render(app, slot, release, port)

    # -- reading -------------------------------------------------------------------------

    def resolve_image(self, target: Target, app: App, ref: str | None) -> ResolvedImage:
        """The source a release runs, named ``local:<dir>@sha256:<content digest>``.

        No ref: the app's source directory. A ref with a digest (promotion, restart,
        a recorded release): a kept snapshot with that digest, else the directory if it
        still hashes the same. A ref without one: that directory (``deploy --image DIR``).
        """
        exclude = [f.path for f in app.files]
        if ref is None:
            source = app.source_dir.resolve()
            return self._resolve_dir(source, exclude)
        body = ref[len("local:") :] if ref.startswith("local:") else ref
        path_part, _, digest = body.partition("@")
        if digest:
            if not digest.startswith("sha256:"):
                raise InputError(f"{ref!r}: a local image digest looks like sha256:<hex>")
            found = self._find_snapshot(app, digest)
            if found is not None:
                return ResolvedImage(
                    ref=f"local:{path_part}@{digest}",
                    digest=digest,
                    meta=ImageMeta("local", str(found)),
                )
            source = Path(path_part)
            if source.is_dir() and snapshot.digest(source, exclude, [self.root]) == digest:
                return ResolvedImage(
                    ref=f"local:{path_part}@{digest}",
                    digest=digest,
                    meta=ImageMeta("local", str(source)),
                )
            raise InputError(
                f"no kept snapshot of {app.name} has digest {digest}, and {path_part} no longer "
                f"has it (hint: only the last {KEEP_SNAPSHOTS} snapshots of each slot are kept; "
                "deploy the source again)"
            )
        source = Path(os.path.expanduser(path_part)).resolve()
        if not source.is_dir():
            raise InputError(f"--image {ref!r}: the local backend runs a directory; none is there")
        return self._resolve_dir(source, exclude)

    def _resolve_dir(self, source: Path, exclude: list[str]) -> ResolvedImage:
        try:
            digest = snapshot.digest(source, exclude, [self.root])
        except OSError as exc:
            raise InputError(f"cannot read the source directory {source}: {exc}") from exc
        return ResolvedImage(
            ref=f"local:{source}@{digest}", digest=digest, meta=ImageMeta("local", str(source))
        )

    def observe(self, target: Target) -> Observed:
        d = self.dirs(target)
        units: list[ObservedUnit] = []
        current = read_current_snapshot(d)
        if current is not None:
            units.append(
                ObservedUnit(key="snapshot", kind="snapshot", digest=current.unit, phase=0)
            )
        for name, meta in read_generations(d).items():
            units.append(
                ObservedUnit(
                    key=f"gen/{name}/snapshot",
                    kind="snapshot",
                    digest=meta.unit,
                    generation=name,
                    phase=0,
                )
            )
        infos = self.supervisor.info()
        programs = read_programs(d)
        known: set[str] = set()
        for key, rec in programs.items():
            names = [i.name for i in rec.instances]
            known.update(names)
            up = all(state_of(infos.get(n)) in RUNNING_STATES for n in names)
            state: UnitState = "running" if up else "stopped"
            if rec.generation and not names:
                state = "asleep"
            units.append(
                ObservedUnit(
                    key=key,
                    kind="program",
                    digest=rec.unit,
                    state=state,
                    process=rec.process,
                    generation=rec.generation,
                    phase=1,
                )
            )
        prefix = self._instance_prefix(target)
        for name in infos:
            if name.startswith(prefix) and name not in known:
                parts = name[len(prefix) :].split(".")
                if len(parts) == 3:
                    key = render.program_key(parts[0], parts[1])
                    if key not in programs:
                        units.append(
                            ObservedUnit(key=key, kind="program", digest=None, process=parts[0])
                        )
        for host, route in read_routes(d).items():
            units.append(
                ObservedUnit(
                    key=f"route/{host}",
                    kind="route",
                    digest=route.unit,
                    process=route.process,
                    phase=2,
                )
            )
        return Observed.of(units)

    def read_records(self, target: Target) -> list[Release]:
        d = self.dirs(target)
        return [codec.from_json(r) for r in read_records_file(d.records)]

    def status(self, target: Target) -> list[ProcessStatus]:
        d = self.dirs(target)
        infos = self.supervisor.info()
        urls: dict[str, list[str]] = {}
        for host, route in read_routes(d).items():
            urls.setdefault(route.program, []).append(f"http://{host}:{route.router_port}")
        for host, (_, claim) in serving(read_claims(d)).items():
            urls.setdefault(claim.program, []).append(f"http://{host}:{claim.router_port}")
        rows: list[ProcessStatus] = []
        programs = sorted(read_programs(d).items(), key=lambda kv: (kv[1].process, kv[0]))
        for key, rec in programs:
            if rec.generation and not rec.instances:
                rows.append(
                    ProcessStatus(
                        process=rec.process,
                        desired=0,
                        ready=0,
                        generation=rec.generation,
                        detail={
                            "release": rec.release,
                            "state": "asleep",
                            "deployment_id": rec.deployment_id,
                        },
                    )
                )
            for i, inst in enumerate(rec.instances):
                info = infos.get(inst.name)
                state = state_of(info) if infos else "STOPPED"
                running = state in RUNNING_STATES
                healthy, health_text = self._health_now(rec, inst, state)
                uptime = None
                if info and state == "RUNNING":
                    uptime = _human(max(0, int(info["now"]) - int(info["start"])))
                label = rec.process if len(rec.instances) == 1 else f"{rec.process}.{i + 1}"
                rows.append(
                    ProcessStatus(
                        process=label,
                        desired=1,
                        ready=1 if healthy else 0,
                        generation=rec.generation,
                        detail={
                            "release": rec.release,
                            "pid": info.get("pid") if info and running else None,
                            "port": inst.port,
                            "state": state.lower(),
                            "health": health_text,
                            "uptime": uptime,
                            "restarts": max(0, inst.starts() - 1),
                            "url": " ".join(urls.get(key, [])) or None,
                            "deployment_id": rec.deployment_id,
                        },
                    )
                )
        return rows

    def _health_now(self, rec: ProgramRecord, inst: Instance, state: str) -> tuple[bool, str]:
        """One live probe of an instance, for ``status``."""
        if state not in RUNNING_STATES:
            return False, "down"
        check = rec.health
        if check.mode == "http":
            ok, why = health.http_probe(inst.port, str(check.path), 1.0)
            return ok, "ok" if ok else f"failing: {why}"
        if check.mode == "tcp":
            ok, why = health.tcp_probe(inst.port, 1.0)
            return ok, "ok" if ok else f"failing: {why}"
        return state == "RUNNING", "running" if state == "RUNNING" else state.lower()

    def diff(self, target: Target, plan: Plan) -> list[str]:
        d = self.dirs(target)
        routes = read_routes(d)
        programs = read_programs(d)
        lines: list[str] = []
        for step in plan.steps:
            if isinstance(step, ApplyObject) and step.kind == "route" and plan.release:
                body = RouteBody.of(plan.release.artifact.get(step.unit))
                held = routes.get(body.host)
                was = held.program if held else "nothing"
                lines.append(f"  {body.host}: {was} -> {body.program}")
            elif isinstance(step, PointHost):
                serves = serving(read_claims(d)).get(step.host)
                was = f"generation {serves[0]}" if serves else "nothing"
                lines.append(f"  {step.host}: {was} -> generation {step.generation}")
            elif isinstance(step, Remove) and step.kind == "program":
                rec = programs.get(step.unit)
                ports = ", ".join(str(p) for p in rec.ports) if rec else ""
                lines.append(
                    f"  {step.unit} ({rec.release if rec else '?'}, port {ports or '-'}): "
                    "drained through the router, then stopped"
                )
        return (["changes on this machine:", *lines]) if lines else []

    def logs(self, target: Target, process: str | None, follow: bool, lines: int) -> Iterator[str]:
        d = self.dirs(target)
        if process is not None and process not in self.app.processes:
            raise InputError(
                f"no process {process!r} in {self.app.name} "
                f"(processes: {', '.join(self.app.processes)})"
            )
        redact = self._redactor(d)

        def sources() -> list[tuple[str, Path]]:
            out: list[tuple[str, Path]] = []
            recs = sorted(read_programs(d).values(), key=lambda r: (r.process, r.revision))
            for rec in recs:
                if process is not None and rec.process != process:
                    continue
                for i, inst in enumerate(rec.instances):
                    out.append((f"{rec.process}.{i + 1}@{rec.release}", inst.log))
            if out:
                return out
            # Nothing runs (a failed first deploy, a stopped slot): the newest log of each.
            newest: dict[str, Path] = {}
            for p in sorted(d.logs.glob("*.log"), key=lambda p: p.stat().st_mtime):
                proc = p.name.split(".", 1)[0]
                if not proc.startswith("_") and (process is None or proc == process):
                    newest[proc] = p
            return [(f"{proc} (stopped)", p) for proc, p in sorted(newest.items())]

        return logfiles.stream(sources, follow, lines, redact)

    def live_digest(self, target: Target, release: Release) -> str | None:
        d = self.dirs(target)
        infos = self.supervisor.info()
        programs = read_programs(d)
        for unit in release.artifact:
            rec = programs.get(unit.key)
            if unit.kind != "program" or rec is None:
                continue
            if any(state_of(infos.get(i.name)) in RUNNING_STATES for i in rec.instances):
                return rec.snapshot_digest or None
        return None

    # -- mutating ------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(
        self, clearance: Clearance, target: Target, holder: LockHolder, reporter: Reporter
    ) -> Iterator[None]:
        clearance.require_covers(target)
        d = self.dirs(target)
        private_dir(self.root)
        private_dir(d.base)
        with slot_lock(d.lock, target.slot, holder, reporter):
            yield

    def write_records(
        self, clearance: Clearance, target: Target, records: Sequence[Release]
    ) -> None:
        clearance.require_covers(target)
        d = self.dirs(target)
        private_dir(d.base)
        stored = {int(r["revision"]): r for r in read_records_file(d.records)}
        for r in records:
            stored[r.revision] = codec.to_json(r)
        try:
            write_records_file(d.records, [stored[k] for k in sorted(stored)])
        except OSError as exc:
            raise RecordError(f"cannot write the release records to {d.records}: {exc}") from exc

    def delete_records(
        self, clearance: Clearance, target: Target, revisions: Sequence[int]
    ) -> None:
        clearance.require_covers(target)
        d = self.dirs(target)
        drop = set(revisions)
        stored = [r for r in read_records_file(d.records) if int(r["revision"]) not in drop]
        try:
            write_records_file(d.records, stored)
        except OSError as exc:
            raise RecordError(f"cannot write the release records to {d.records}: {exc}") from exc

    def apply(
        self,
        clearance: Clearance,
        target: Target,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None:
        clearance.require_covers(target)
        self._secrets.update(secrets)
        d = self.dirs(target)
        try:
            if unit.kind == "snapshot":
                self._apply_snapshot(d, unit, secrets, reporter)
            elif unit.kind == "program" and unit.generation:
                self._apply_generation_program(target, d, unit, secrets, reporter)
            elif unit.kind == "program":
                self._apply_program(target, d, unit, action, secrets, reporter)
            elif unit.kind == "route":
                self._apply_route(d, unit, reporter)
            else:
                raise BackendError(f"the local backend cannot apply a {unit.kind!r} unit")
        except OSError as exc:
            raise BackendError(f"{unit.key}: {exc}") from exc

    # snapshot ---------------------------------------------------------------------------

    def _apply_snapshot(
        self, d: SlotDirs, unit: Unit, secrets: Mapping[str, Secret], reporter: Reporter
    ) -> None:
        body = SnapshotBody.of(unit)
        exclude = [f.path for f in body.files]
        private_dir(d.base)
        d.releases.mkdir(exist_ok=True)
        dest = d.releases / f"r{body.revision}"
        if not (dest.is_dir() and snapshot.digest_of_kept(dest) == body.digest):
            if dest.exists():
                shutil.rmtree(dest)
            self._make_snapshot(dest, body.digest, body.source, exclude)
            snapshot.remember(dest, body.revision, body.digest, body.source, _now())
            reporter.line(f"  snapshot r{body.revision}: {dest} ({body.digest[:19]})")
        for f in body.files:
            path = dest / f.path
            path.parent.mkdir(parents=True, exist_ok=True)
            content = reveal(f.content, secrets)
            write_atomic(path, str(content).encode(), f.mode)
        current = SnapshotRecord(unit.digest, body.revision, dest.name, body.digest)
        if unit.generation:  # the generation's own snapshot, kept as long as it exists
            generations = read_generations(d)
            held = generations.get(unit.generation)
            created = held.created_at if held and held.created_at else _now_precise()
            generations[unit.generation] = Generation.of(current, created)
            write_generations(d, generations)
        else:
            write_current_snapshot(d, current)
        self._prune_snapshots(d, reporter)

    def _make_snapshot(
        self, dest: Path, digest: str, source: str | None, exclude: list[str]
    ) -> None:
        sources = [p for p in (self._find_snapshot(self.app, digest),) if p is not None]
        if source:
            sources.append(Path(source))
        if not snapshot.make(dest, digest, sources, exclude, [self.root]):
            raise BackendError(
                f"cannot make snapshot {dest.name}: {source or 'its source'} no longer has "
                f"digest {digest} (the source changed since the release was planned?) and no "
                f"kept snapshot has it (hint: plan and deploy again)"
            )

    def _prune_snapshots(self, d: SlotDirs, reporter: Reporter) -> None:
        in_use = self._snapshots_in_use(d)
        dropped = snapshot.prune(d.releases, KEEP_SNAPSHOTS, in_use)
        if dropped:
            reporter.line(
                f"  pruned snapshots {', '.join(dropped)} (keeping the last {KEEP_SNAPSHOTS})"
            )

    # programs ---------------------------------------------------------------------------

    def _apply_program(
        self,
        target: Target,
        d: SlotDirs,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None:
        programs = read_programs(d)
        existing = programs.get(unit.key)
        if existing is not None and action == "start" and existing.unit == unit.digest:
            self._start_down_instances(d, unit, existing, secrets, reporter)
            return
        if existing is not None:
            self._stop_program(d, unit.key, existing, drain=False, reporter=reporter)
            programs = read_programs(d)
        body = ProgramBody.of(unit)
        snap = self._snapshot_dir(d, body.snapshot)
        prefix = f"{self._instance_prefix(target)}{body.process}.{body.deployment_id}"
        ports = self.ports.allocate(body.replicas, prefix)
        private_dir(d.run)
        d.logs.mkdir(parents=True, exist_ok=True)
        instances = tuple(
            Instance.new(d, prefix, body.process, body.deployment_id, n, port)
            for n, port in enumerate(ports)
        )
        # Recorded before anything starts: a kill -9 from here on leaves a program the
        # next run can see (and stop), never an orphan nobody knows about.
        programs[unit.key] = ProgramRecord(
            unit=unit.digest,
            process=body.process,
            deployment_id=body.deployment_id,
            release=body.release,
            snapshot=snap,
            snapshot_digest=body.snapshot,
            health=body.health,
            instances=instances,
            created_at=_now(),
        )
        write_programs(d, programs)
        env = self._env_file(body, secrets)
        self.supervisor.ensure()
        with contextlib.suppress(BackendError):
            self.router(self.router_port).ensure(wait=False)  # warm up while we start
        for inst in instances:
            self._start_instance(inst, env, body.command, snap)
        ports_text = ", ".join(str(p) for p in ports) or "no instances"
        reporter.line(f"  {body.process} {body.release} starting on 127.0.0.1:{ports_text}")
        self._refresh_tables(d, reporter, only_program=unit.key)

    def _start_instance(
        self, inst: Instance, env: EnvFile, command: Sequence[str], snap: Path
    ) -> None:
        """Write one instance's env file (0600), reset its start counter and (re)add it to
        supervisord, which starts it."""
        env.with_port(inst.port).write(inst.env)
        with contextlib.suppress(FileNotFoundError):
            inst.counter.unlink()
        launch = [sys.executable, str(LAUNCHER), str(inst.env), str(inst.counter), "--"]
        self.supervisor.add(inst.name, program_conf(inst.name, [*launch, *command], snap, inst.log))

    def _start_down_instances(
        self,
        d: SlotDirs,
        unit: Unit,
        rec: ProgramRecord,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None:
        """``start`` of a recorded, up-to-date program: its instances keep their names and
        ports (the routes point at them); those running are left alone (same pid, no
        restart), only those down are started again."""
        body = ProgramBody.of(unit)
        snap = rec.snapshot if rec.snapshot.is_dir() else self._snapshot_dir(d, body.snapshot)
        self.supervisor.ensure()
        infos = self.supervisor.info()
        env = self._env_file(body, secrets)
        private_dir(d.run)
        d.logs.mkdir(parents=True, exist_ok=True)
        instances: list[Instance] = []
        started: list[Instance] = []
        for inst in rec.instances:
            if state_of(infos.get(inst.name)) in RUNNING_STATES:
                # its earlier starts are not held against it by the health gate
                instances.append(replace(inst, starts_before=max(inst.starts() - 1, 0)))
            else:
                started.append(replace(inst, starts_before=0))
                instances.append(started[-1])
        self._save_program(d, unit.key, replace(rec, snapshot=snap, instances=tuple(instances)))
        for inst in started:
            self._start_instance(inst, env, body.command, snap)
        ports_text = ", ".join(str(i.port) for i in started) or "none"
        reporter.line(
            f"  {rec.process} {body.release}: starting the instances that were down "
            f"on 127.0.0.1:{ports_text}; {len(instances) - len(started)} running left alone"
        )
        self._refresh_tables(d, reporter, only_program=unit.key)

    # generation programs: a record and an env template; instances come and go by scale --

    def _apply_generation_program(
        self,
        target: Target,
        d: SlotDirs,
        unit: Unit,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None:
        """Record the program of a generation with its env template (the env it will always
        run with, secrets revealed: 0600), then start its instances. A program already
        recorded with this exact unit is only woken (``start``)."""
        body = ProgramBody.of(unit)
        generation = str(body.generation)
        existing = read_programs(d).get(unit.key)
        if existing is not None and existing.unit != unit.digest:
            self._stop_program(d, unit.key, existing, drain=True, reporter=reporter)
            existing = None
        if existing is None:
            snap = self._generation_snapshot(d, generation)
            private_dir(d.run)
            d.logs.mkdir(parents=True, exist_ok=True)
            template = d.run / f"{body.process}.{body.deployment_id}.env.json"
            self._env_file(body, secrets).write(template)
            rec = ProgramRecord(
                unit=unit.digest,
                process=body.process,
                deployment_id=body.deployment_id,
                release=body.release,
                snapshot=snap,
                snapshot_digest=body.snapshot,
                health=body.health,
                instances=(),
                created_at=_now_precise(),
                generation=generation,
                command=body.command,
                env_template=template,
                replicas=0,
            )
            self._save_program(d, unit.key, rec)
        self._scale_program(target, d, unit.key, body.replicas, reporter)

    def _scale_program(
        self, target: Target, d: SlotDirs, key: str, replicas: int, reporter: Reporter
    ) -> None:
        """Make ``replicas`` instances of a generation's program run: start the missing ones
        (fresh ports, env from the template, start counter reset), restart those that are
        down, or take the extra ones out of the router, drain and stop them. Every change
        is recorded before it is made."""
        rec = read_programs(d)[key]
        instances = list(rec.instances)
        if replicas < len(instances):
            keep, doomed = instances[:replicas], instances[replicas:]
            self._save_program(d, key, rec.with_instances(keep, replicas))
            self._refresh_tables(d, reporter, only_program=key)  # out of the router first
            self._drain([i.upstream for i in doomed], key, reporter)
            self._remove_instances(doomed)
            what = "asleep" if replicas == 0 else f"scaled to {replicas}"
            reporter.line(f"  {rec.process} of generation {rec.generation}: {what}")
            return
        prefix = f"{self._instance_prefix(target)}{rec.process}.{rec.deployment_id}"
        fresh = range(len(instances), replicas)
        ports = self.ports.allocate(len(fresh), prefix)
        for n, port in zip(fresh, ports, strict=True):
            instances.append(Instance.new(d, prefix, rec.process, rec.deployment_id, n, port))
        self._save_program(d, key, rec.with_instances(instances, replicas))
        self.supervisor.ensure()
        infos = self.supervisor.info()
        starting = [
            inst
            for inst in instances
            if inst.port in ports or state_of(infos.get(inst.name)) not in RUNNING_STATES
        ]
        if not starting:
            return
        template = EnvFile.read(rec.env_template) if rec.env_template else None
        if template is None:
            raise BackendError(
                f"{key}: its env template {rec.env_template} is missing "
                "(hint: deploy again, or shipway gc the generation)"
            )
        with contextlib.suppress(BackendError):
            self.router(self.router_port).ensure(wait=False)  # warm up while we start
        for inst in starting:
            self._start_instance(inst, template, rec.command, rec.snapshot)
        ports_text = ", ".join(str(i.port) for i in starting)
        reporter.line(
            f"  {rec.process} {rec.release} of generation {rec.generation} starting on "
            f"127.0.0.1:{ports_text}"
        )
        self._refresh_tables(d, reporter, only_program=key)

    def _save_program(self, d: SlotDirs, key: str, rec: ProgramRecord) -> None:
        programs = read_programs(d)
        programs[key] = rec
        write_programs(d, programs)

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

    def _remove_instances(self, instances: Iterable[Instance]) -> None:
        """Stop instances (already out of the router), forget their files, free their ports."""
        gone = list(instances)
        for inst in gone:
            self.supervisor.remove(inst.name)
            inst.forget_files()
        self.ports.release(i.port for i in gone)

    def _stop_program(
        self, d: SlotDirs, key: str, rec: ProgramRecord, *, drain: bool, reporter: Reporter
    ) -> None:
        if drain:
            self._drain(rec.upstreams, key, reporter)
        self._remove_instances(rec.instances)
        if rec.env_template:
            with contextlib.suppress(FileNotFoundError):
                rec.env_template.unlink()
        programs = read_programs(d)
        programs.pop(key, None)
        write_programs(d, programs)

    def _drain(self, upstreams: list[str], key: str, reporter: Reporter) -> None:
        ports = {self.router_port}
        for path in (self.root / "router").glob("*"):
            if path.name.isdigit():
                ports.add(int(path.name))
        for port in sorted(ports):
            router = self.router(port)
            if not router.answering():
                continue
            drained, busy = router.drain(upstreams, DRAIN_TIMEOUT)
            if not drained:
                reporter.line(
                    f"  warning: {key} still had {busy} requests in flight after "
                    f"{DRAIN_TIMEOUT:g}s of draining; stopping it anyway"
                )

    # routes -----------------------------------------------------------------------------

    def _apply_route(self, d: SlotDirs, unit: Unit, reporter: Reporter) -> None:
        body = RouteBody.of(unit)
        host, port = body.host, body.router_port
        rec = read_programs(d).get(body.program)
        if rec is None:
            raise BackendError(f"route {host} points at {body.program}, which is not running")
        routes = read_routes(d)
        before = routes.get(host)
        ports = {port} | ({before.router_port} if before else set())
        for p in sorted(ports):  # the router must run before the record says it routes
            self.router(p).ensure(wait=True)
        routes[host] = Route(
            program=body.program,
            process=body.process,
            router_port=port,
            since=self._next_since(port, host),
            unit=unit.digest,
        )
        write_routes(d, routes)

        def undo() -> None:
            routes = read_routes(d)
            if before is None:
                routes.pop(host, None)
            else:
                routes[host] = before
            write_routes(d, routes)

        self._switch(d, ports, undo)
        reporter.line(
            f"  serving http://{host}:{port}/ -> {body.process} {rec.release} "
            f"({', '.join(rec.upstreams)})"
        )

    def _switch(self, d: SlotDirs, ports: Iterable[int], undo: Callable[[], None]) -> None:
        """After a record moved a host: rewrite and reload the tables on ``ports``. When a
        router does not take it, ``undo`` puts the record back and the tables follow it, so
        no record says a host moved when it may not have."""
        try:
            self._retable(d, ports, must_reload=True)
        except BaseException:
            undo()
            with contextlib.suppress(BackendError, OSError):
                self._retable(d, ports, must_reload=True)
            raise

    def _retable(self, d: SlotDirs, ports: Iterable[int], *, must_reload: bool = False) -> None:
        """Rewrite the slot's table files on these router ports, and reload each router that
        runs (``must_reload``: every one, or an error)."""
        for port in sorted(set(ports)):
            self._write_tables(d, port)
            router = self.router(port)
            if must_reload or router.answering():
                router.reload()

    def _write_tables(self, d: SlotDirs, port: int) -> None:
        """Rewrite the slot's table files for one router port from the records: the rolling
        routes, and one file per generation with claims there (others' files removed)."""
        programs = read_programs(d)
        router = self.router(port)

        def entry(route: Route) -> dict[str, Any]:
            rec = programs.get(route.program)
            return {
                "program": route.program,
                "upstreams": rec.upstreams if rec else [],
                "since": route.since,
            }

        rolling = {h: entry(r) for h, r in read_routes(d).items() if r.router_port == port}
        router.write_table(d.app, d.slot, rolling)
        claimed: set[str] = set()
        for generation, hosts in read_claims(d).items():
            here = {h: entry(c) for h, c in hosts.items() if c.router_port == port}
            if here:
                router.write_table(d.app, d.slot, here, generation)
                claimed.add(generation)
        for generation, path in router.generation_tables(d.app, d.slot).items():
            if generation not in claimed:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def _next_since(self, port: int, host: str) -> float:
        """When a new claim of ``host`` is made: now, and always after every claim the
        router holds for it (a clock step back must not make a new claim lose)."""
        held = self.router(port).table().get(host.lower())
        return max(time.time(), float(held["since"]) + 0.001 if held else 0.0)

    def _refresh_tables(
        self, d: SlotDirs, reporter: Reporter, only_program: str | None = None
    ) -> None:
        """Rewrite and reload the router tables that name a program whose ports changed."""
        named = [*read_routes(d).values()]
        named += [c for hosts in read_claims(d).values() for c in hosts.values()]
        ports = {r.router_port for r in named if only_program in (None, r.program)}
        self._retable(d, ports)

    def remove(
        self, clearance: Clearance, target: Target, step: Remove, reporter: Reporter
    ) -> None:
        clearance.require_covers(target)
        d = self.dirs(target)
        if step.kind == "route":
            host = step.unit.split("/", 1)[1]
            routes = read_routes(d)
            before = routes.pop(host, None)
            write_routes(d, routes)
            if before is not None:
                self._retable(d, [before.router_port])
            return
        if step.kind == "program":
            rec = read_programs(d).get(step.unit)
            if rec is not None and rec.generation:
                self._remove_generation_program(d, step.unit, rec, reporter)
                return
            routed = [h for h, r in read_routes(d).items() if r.program == step.unit]
            if routed:
                raise CleanupFailed(
                    f"{step.unit} still serves {', '.join(routed)}",
                    f"point {', '.join(routed)} at another program, then shipway deploy again",
                )
            if rec is None:  # not recorded (an orphan): stop it by name
                process, dep_id = step.unit.rsplit("program/", 1)[1].split("@", 1)
                prefix = f"{self._instance_prefix(target)}{process}.{dep_id}."
                for name in self.supervisor.names():
                    if name.startswith(prefix):
                        self.supervisor.remove(name)
                return
            self._stop_program(d, step.unit, rec, drain=True, reporter=reporter)
            return
        if step.kind == "snapshot" and step.unit.startswith("gen/"):
            self._forget_generation(d, step.unit.split("/")[1], reporter)
            return
        if step.kind == "snapshot":
            with contextlib.suppress(FileNotFoundError):
                d.current_snapshot.unlink()
            return
        raise BackendError(f"the local backend cannot remove a {step.kind!r} unit")

    def _remove_generation_program(
        self, d: SlotDirs, key: str, rec: ProgramRecord, reporter: Reporter
    ) -> None:
        """Remove one program of a generation (a targeted restart replaced it): the hosts
        it serves move to its newest sibling of the same process (already through the
        gate), atomically, then it is drained and stopped. With no sibling, a host it
        really serves keeps it (CleanupFailed); stale claims of it are simply dropped."""
        generation = str(rec.generation)
        claims = read_claims(d)
        mine = claims.get(generation, {})
        pointing = sorted(h for h, c in mine.items() if c.program == key)
        if pointing:
            ports = {mine[h].router_port for h in pointing}
            sibling = next(
                (
                    k
                    for k, r in self._generation_programs(d, generation, rec.process)
                    if k != key and r.instances
                ),
                None,
            )
            if sibling is None:
                served = [h for h in pointing if h in self._hosts_served_by(d, generation)]
                if served:
                    raise CleanupFailed(
                        f"{key} still serves {', '.join(served)}",
                        f"switch {', '.join(served)} to another generation "
                        "(shipway switch SLOT GEN), then shipway gc SLOT",
                    )
                for h in pointing:
                    mine.pop(h)
            else:
                for h in pointing:
                    mine[h] = replace(mine[h], program=sibling)
            write_claims(d, claims)
            self._retable(d, ports)
            if sibling is not None:
                reporter.line(f"  {', '.join(pointing)} now served by {sibling}")
        self._stop_program(d, key, rec, drain=True, reporter=reporter)

    def _hosts_served_by(self, d: SlotDirs, generation: str) -> list[str]:
        """Hosts the router table says this generation of the slot serves (its claim wins)."""
        served = []
        for host, claim in read_claims(d).get(generation, {}).items():
            held = self.router(claim.router_port).table().get(host.lower())
            if held and (held["app"], held["slot"], held["generation"]) == (
                d.app,
                d.slot,
                generation,
            ):
                served.append(host)
        return sorted(served)

    def _forget_generation(self, d: SlotDirs, generation: str, reporter: Reporter) -> None:
        """Drop the generation's claims, drain and stop its programs, forget it, and free its
        snapshot (unless something else still uses that directory)."""
        claims = read_claims(d)
        dropped = claims.pop(generation, {})
        write_claims(d, claims)
        self._retable(d, {c.router_port for c in dropped.values()})
        for key, rec in self._generation_programs(d, generation):
            self._stop_program(d, key, rec, drain=True, reporter=reporter)
            reporter.line(f"  removed {key}")
        generations = read_generations(d)
        meta = generations.pop(generation, None)
        write_generations(d, generations)
        name = meta.dir if meta else ""
        if name and name not in self._snapshots_in_use(d):
            snapshot.discard(d.releases / name)
            reporter.line(f"  freed snapshot {name} of generation {generation}")

    # the health gate --------------------------------------------------------------------

    def wait(
        self,
        target: Target,
        step: WaitRollout,
        artifact: Artifact,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        d = self.dirs(target)
        programs = read_programs(d)
        for key in step.units:
            rec = programs.get(key)
            if rec is None:
                return Failure(
                    reason=Reason.NOT_STARTED,
                    message=f"{key} is not recorded as started",
                    process=step.process,
                )
            failure = health_gate(self.supervisor, rec, deadline, reporter, self._fail_with(d, rec))
            if failure is not None:
                return failure
        return None

    def _fail_with(self, d: SlotDirs, rec: ProgramRecord) -> FailureOf:
        """How a failure of one of ``rec``'s instances is told: the process, the reason, and
        the last lines of its log (secret values masked)."""
        redact = self._redactor(d)

        def failure(inst: Instance, reason: str, message: str, code: int | None) -> Failure:
            tail = [redact(line) for line in logfiles.tail(inst.log, LOG_TAIL)]
            details = [f"last lines of its log ({inst.log}):", *(f"| {t}" for t in tail)]
            if not tail:
                details = [f"its log ({inst.log}) is empty"]
            return Failure(
                reason=reason,
                message=message,
                process=rec.process,
                exit_code=code,
                details=tuple(details),
            )

        return failure

    # the release command ----------------------------------------------------------------

    def run_release_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        command: Sequence[str],
        secrets: Mapping[str, Secret],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        clearance.require_covers(target)
        self._secrets.update(secrets)
        d = self.dirs(target)
        cwd = (
            self._generation_snapshot(d, release.generation)
            if release.generation
            else self._snapshot_dir(d, release.digest or "")
        )
        spec_env = {str(k): str(v) for k, v in (release.spec.get("env") or {}).items()}
        env = {
            **self._base_env(),
            **spec_env,
            **{n: s.reveal() for n, s in secrets.items()},
            "SHIPWAY_APP": target.app,
            "SHIPWAY_SLOT": target.slot,
            "SHIPWAY_RELEASE": f"r{release.revision}",
        }
        words = [expand(w, env, keep=secrets.keys()) for w in command]  # never a secret in argv
        d.logs.mkdir(parents=True, exist_ok=True)
        log = d.logs / f"_release-r{release.revision}.log"
        redact = self._redactor(d)
        try:
            proc = subprocess.Popen(
                words,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            return Failure(
                reason=Reason.RELEASE_COMMAND_FAILED,
                message=f"cannot run {words[0]!r}: {exc.strerror or exc}",
            )
        assert proc.stdout is not None
        with open(log, "wb") as out:
            os.set_blocking(proc.stdout.fileno(), False)
            buffer = b""
            while True:
                chunk = proc.stdout.read()
                if chunk:
                    out.write(chunk)
                    buffer += chunk
                    *complete, buffer = buffer.split(b"\n")
                    for raw in complete:
                        reporter.line(f"  release | {redact(raw.decode(errors='replace'))}")
                if proc.poll() is not None and not chunk:
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    return Failure(
                        reason=Reason.RELEASE_COMMAND_TIMEOUT,
                        message=f"{' '.join(command)} did not finish before the deadline",
                        details=tuple(f"| {redact(t)}" for t in logfiles.tail(log, LOG_TAIL)),
                    )
                if not chunk:
                    time.sleep(0.05)
        code = proc.returncode
        if code != 0:
            return Failure(
                reason=Reason.RELEASE_COMMAND_FAILED,
                message=f"{' '.join(command)} exited with code {code}",
                exit_code=code,
                details=(
                    f"last lines of its output ({log}):",
                    *(f"| {redact(t)}" for t in logfiles.tail(log, LOG_TAIL)),
                ),
            )
        return None

    # generations ------------------------------------------------------------------------
    # A blue-green slot's generations (see the module doc and :mod:`.generations`).

    def hosts(self, app: App, slot: Slot) -> list[tuple[str, str]]:
        return render.hosts_of(app, slot)

    def scale(self, clearance: Clearance, target: Target, step: Scale, reporter: Reporter) -> None:
        """Start (wake) or stop (put to sleep: no instance, records kept) a generation's
        instances of one process. A generation serving a host is never put to sleep."""
        clearance.require_covers(target)
        d = self.dirs(target)
        if step.generation is None:
            raise BackendError("the local backend scales the processes of a generation only")
        found = self._generation_programs(d, step.generation, step.process)
        if not found and step.replicas == 0:  # e.g. recovering a deploy killed before apply
            reporter.line(f"  generation {step.generation} runs no {step.process}: nothing to stop")
            return
        if not found:
            raise BackendError(
                f"generation {step.generation} has no {step.process} program "
                f"(hint: shipway gens {target.slot})"
            )
        try:
            if step.replicas > 0:
                self._scale_program(target, d, found[0][0], step.replicas, reporter)
                return
            served = self._hosts_served_by(d, step.generation)
            if served:
                raise BackendError(
                    f"generation {step.generation} serves {', '.join(served)}: it is not put "
                    "to sleep under its traffic (hint: switch to another generation first)"
                )
            for key, _ in found:
                self._scale_program(target, d, key, 0, reporter)
        except OSError as exc:
            raise BackendError(f"scaling {step.process} of {step.generation}: {exc}") from exc

    def wait_replicas(
        self, target: Target, step: WaitReplicas, deadline: float, reporter: Reporter
    ) -> Failure | None:
        """The health gate, on the generation's (newest) program of the process."""
        d = self.dirs(target)
        found = self._generation_programs(d, step.generation or "", step.process)
        if not found:
            return Failure(
                reason=Reason.NOT_STARTED,
                message=f"generation {step.generation} has no {step.process} program",
                process=step.process,
            )
        key, rec = found[0]
        have = len(rec.instances)
        if have < step.replicas:
            return Failure(
                reason=Reason.NOT_SCALED,
                message=f"{key} has {have} of {step.replicas} instances",
                process=step.process,
            )
        return health_gate(self.supervisor, rec, deadline, reporter, self._fail_with(d, rec))

    def point_host(
        self, clearance: Clearance, target: Target, step: PointHost, reporter: Reporter
    ) -> None:
        """Claim the host for the generation's program in the router, newer than every other
        claim: one table write and one reload, so the switch is atomic. On failure the claim
        is withdrawn, so no record says the host moved when it may not have."""
        clearance.require_covers(target)
        d = self.dirs(target)
        generation = step.generation or ""
        running = [
            (k, r) for k, r in self._generation_programs(d, generation, step.process) if r.instances
        ]
        if not running:
            raise BackendError(
                f"{step.process} of generation {generation} is not running: {step.host} cannot "
                f"point at it (hint: shipway wake {target.slot} {generation})"
            )
        key, rec = running[0]
        port = self.router_port
        try:
            self.router(port).ensure(wait=True)
            before = read_claims(d)
            claims = read_claims(d)
            claims.setdefault(generation, {})[step.host] = Route(
                program=key,
                process=step.process,
                router_port=port,
                since=self._next_since(port, step.host),
            )
            write_claims(d, claims)
            self._switch(d, [port], lambda: write_claims(d, before))
        except OSError as exc:
            raise BackendError(f"pointing {step.host} at {generation}: {exc}") from exc
        reporter.line(
            f"  serving http://{step.host}:{port}/ -> {step.process} {rec.release} of "
            f"generation {generation} ({', '.join(rec.upstreams)})"
        )

    def drop_host(
        self, clearance: Clearance, target: Target, step: DropHost, reporter: Reporter
    ) -> None:
        """Best effort: withdraw the generation's claim of the host and reload the router.
        The claim already loses to the newer one, so a failure here leaves traffic where it
        belongs; it is reported with the manual fix (CleanupFailed)."""
        clearance.require_covers(target)
        d = self.dirs(target)
        generation = step.generation or ""
        claims = read_claims(d)
        claim = claims.get(generation, {}).pop(step.host, None)
        if claim is None:
            reporter.line(f"  {step.host} was not routed to generation {generation}")
            return
        port = claim.router_port
        router = self.router(port)
        table = router.table_file(d.app, d.slot, generation)
        try:
            write_claims(d, claims)
            self._retable(d, [port], must_reload=True)
        except (BackendError, OSError) as exc:
            raise CleanupFailed(
                f"the router on 127.0.0.1:{port} did not take the drop of {step.host} from "
                f"generation {generation} ({exc}); the stale claim loses to the newer one, so "
                "traffic already goes to the live generation",
                f"remove {step.host} from {table} if it is still there, then reload the "
                f"router: curl --unix-socket {router.sock} -X POST http://router/reload",
            ) from exc
        reporter.line(f"  dropped {step.host} from generation {generation}")

    def generations(self, target: Target) -> list[GenerationInfo]:
        """Oldest first. Live: the generation the slot's hosts point at (its newest claim);
        for an app with no host, the deployed release's generation while it runs. Awake:
        some instance of it runs. Asleep: none does."""
        d = self.dirs(target)
        known = read_generations(d)
        if not known:
            return []
        records = self.read_records(target)
        awake = {
            str(r.generation) for r in read_programs(d).values() if r.generation and r.instances
        }
        claims = read_claims(d)
        live = live_generation(claims)
        if live is None and not any(claims.values()):
            deployed = history.deployed(records)
            if deployed is not None and deployed.generation in awake:
                live = deployed.generation
        out = []
        for name, meta in sorted(known.items(), key=lambda kv: (kv[1].created_at, kv[0])):
            ran = [r.revision for r in records if r.generation == name]
            out.append(
                GenerationInfo(
                    name=name,
                    state="live" if name == live else "awake" if name in awake else "asleep",
                    release=max(ran) if ran else meta.revision,
                    created_at=meta.created_at,
                )
            )
        return out

    def host_owner(self, target: Target, host: str) -> HostOwner | None:
        """Who the router table (its files: the router need not run) says serves ``host`` on
        this slot's router port: any app's slot on it, rolling or blue-green."""
        held = self.router(self.router_port).table().get(host.lower())
        if held is None:
            return None
        return HostOwner(
            app=str(held["app"]),
            slot=str(held["slot"]),
            generation=held.get("generation"),
            where=f"router 127.0.0.1:{self.router_port}",
        )

    def delete_generation(
        self, clearance: Clearance, target: Target, generation: str, reporter: Reporter
    ) -> None:
        """Drain, stop and remove the generation's programs, drop its claims, free its
        snapshot. The generation serving the slot's hosts is refused."""
        clearance.require_covers(target)
        d = self.dirs(target)
        if generation not in read_generations(d):
            raise BackendError(f"no generation {generation} in {target}")
        if generation == live_generation(read_claims(d)):
            raise BackendError(f"generation {generation} is live: switch to another one first")
        try:
            self._forget_generation(d, generation, reporter)
        except OSError as exc:
            raise BackendError(f"deleting generation {generation}: {exc}") from exc

    def close(self) -> None:
        """Nothing stays open between calls: supervisord and the router are their own
        processes, and every file is closed after use."""

    def stop(self, clearance: Clearance, target: Target, reporter: Reporter) -> None:
        """Take the slot's hosts off the router, drain and stop its processes (a blue-green
        slot's generations are put to sleep, kept); then stop the supervisor (and routers)
        when nothing else of this state dir runs."""
        clearance.require_covers(target)
        d = self.dirs(target)
        claims = read_claims(d)
        if any(claims.values()):
            write_claims(d, {})
        self._retable(d, claimed_ports(claims))
        for generation, hosts in sorted(claims.items()):
            for host, c in sorted(hosts.items()):
                reporter.line(f"  dropped http://{host}:{c.router_port}/ ({generation})")
        for host in sorted(read_routes(d)):
            self.remove(
                clearance,
                target,
                Remove(unit=f"route/{host}", kind="route", reason="stop"),
                reporter,
            )
            reporter.line(f"  dropped http://{host}:{self.router_port}/")
        for key, rec in sorted(read_programs(d).items(), key=lambda kv: kv[0]):
            if rec.generation:
                if rec.instances:
                    self._scale_program(target, d, key, 0, reporter)
                continue
            self._stop_program(d, key, rec, drain=True, reporter=reporter)
            reporter.line(f"  stopped {key}")
        prefix = self._instance_prefix(target)
        for name in self.supervisor.names():
            if name.startswith(prefix):
                self.supervisor.remove(name)
        others = [n for n in self.supervisor.names() if not n.startswith("sw-router-")]
        if not others and self.supervisor.running():
            self.supervisor.shutdown()
            reporter.line(f"  nothing else runs in {self.root}: supervisor and router stopped")


_: type[GenerationBackend] = LocalBackend  # mypy checks it keeps the whole protocol
