"""The steps of a rolling plan on this machine, one at a time, each under the guard:

* ``snapshot``: copy the source (verified against its digest) into ``releases/r<N>``,
  write the config files, prune old snapshots (the last ``KEEP_SNAPSHOTS`` are kept);
* ``program`` (:mod:`.programs`): fresh ports, env files, instances added to supervisord;
  the health gate is ``wait`` (:mod:`.health`); removing one drains it through the router
  first, then stops it;
* ``route`` (:mod:`.routes`): a host pointed at a program, the router reloaded atomically;

and the release records, and ``stop``.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from shipway.backends.local import snapshot
from shipway.backends.local.dirs import (
    SlotDirs,
    contained,
    private_dir,
    read_records_file,
    write_atomic,
    write_records_file,
)
from shipway.backends.local.generations import (
    Generation,
    claimed_ports,
    read_claims,
    read_generations,
    write_claims,
    write_generations,
)
from shipway.backends.local.health import LocalHealth
from shipway.backends.local.programs import LocalPrograms
from shipway.backends.local.records import (
    SnapshotRecord,
    read_programs,
    read_routes,
    write_current_snapshot,
)
from shipway.backends.local.render import SnapshotBody
from shipway.backends.local.state import KEEP_SNAPSHOTS, now, now_precise
from shipway.backends.local.volumes import LocalVolumes
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError, CleanupFailed, RecordError
from shipway.guard import Clearance
from shipway.plan.model import Remove, WaitRollout
from shipway.release import codec
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret, reveal


class LocalSteps(LocalPrograms, LocalHealth, LocalVolumes):
    """The steps of a rolling plan and the release records (the protocol's Steps and
    Records); blue-green units removed here are handed to :mod:`.programs`."""

    def write_records(
        self, clearance: Clearance, target: Target, records: Sequence[Release]
    ) -> None:
        d = self._guarded(clearance, target)
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
        d = self._guarded(clearance, target)
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
        d = self._guarded(clearance, target)
        self._secrets.update(secrets)
        try:
            if unit.kind == "volume":
                self._apply_volume(d, unit, reporter)
            elif unit.kind == "snapshot":
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

    def _apply_snapshot(
        self, d: SlotDirs, unit: Unit, secrets: Mapping[str, Secret], reporter: Reporter
    ) -> None:
        body = SnapshotBody.of(unit)
        private_dir(d.base)
        d.releases.mkdir(exist_ok=True)
        dest = d.releases / f"r{body.revision}"
        if not (dest.is_dir() and snapshot.digest_of_kept(dest) == body.digest):
            if dest.exists():
                shutil.rmtree(dest)
            config = body.excluded  # its config files and the places of its volumes
            paths = self._make_snapshot(dest, body.digest, body.source, config)
            snapshot.remember(dest, body.revision, body.digest, body.source, now(), paths)
            reporter.line(f"  snapshot r{body.revision}: {dest} ({body.digest[:19]})")
        for f in body.files:
            path = contained(dest, f.path)  # never through a symlink out of the snapshot
            path.parent.mkdir(parents=True, exist_ok=True)
            content = reveal(f.content, secrets)
            write_atomic(path, str(content).encode(), f.mode)
        self._place_volumes(d, dest, body.volumes)
        current = SnapshotRecord(unit.digest, body.revision, dest.name, body.digest)
        if unit.generation:  # the generation's own snapshot, kept as long as it exists
            generations = read_generations(d)
            held = generations.get(unit.generation)
            created = held.created_at if held and held.created_at else now_precise()
            generations[unit.generation] = Generation.of(current, created)
            write_generations(d, generations)
        else:
            write_current_snapshot(d, current)
        self._prune_snapshots(d, reporter)

    def _make_snapshot(
        self, dest: Path, digest: str, source: str | None, config: list[str]
    ) -> list[str]:
        sources = [p for p in (self._find_snapshot(self.app, digest),) if p is not None]
        if source:
            sources.append(Path(source))
        paths = snapshot.make(dest, digest, sources, lambda s: self._app_files(self.app, s, config))
        if paths is None:
            raise BackendError(
                f"cannot make snapshot {dest.name}: {source or 'its source'} no longer has "
                f"digest {digest} (the source changed since the release was planned?) and no "
                f"kept snapshot has it (hint: plan and deploy again)"
            )
        return paths

    def _prune_snapshots(self, d: SlotDirs, reporter: Reporter) -> None:
        in_use = self._snapshots_in_use(d)
        dropped = snapshot.prune(d.releases, KEEP_SNAPSHOTS, in_use)
        if dropped:
            reporter.line(
                f"  pruned snapshots {', '.join(dropped)} (keeping the last {KEEP_SNAPSHOTS})"
            )

    def remove(
        self, clearance: Clearance, target: Target, step: Remove, reporter: Reporter
    ) -> None:
        d = self._guarded(clearance, target)
        if step.kind == "route":
            self._remove_route(d, step.unit.split("/", 1)[1])
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
        if step.kind == "volume":  # no plan holds one (invariant 11): refused if one did
            raise CleanupFailed(
                f"{step.unit} is data: it is not removed by a rollout",
                f"shipway destroy {target.slot} --volumes --confirm {target.slot} deletes it",
            )
        raise BackendError(f"the local backend cannot remove a {step.kind!r} unit")

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
        watched = [programs[key] for key in step.watch if key in programs]
        for key in step.units:
            rec = programs.get(key)
            if rec is None:
                return Failure(
                    reason=Reason.NOT_STARTED,
                    message=f"{key} is not recorded as started",
                    process=step.process,
                )
            failure = self._gate(target, d, rec, deadline, reporter, watched)
            if failure is not None:
                return failure
        return None

    def stop(self, clearance: Clearance, target: Target, reporter: Reporter) -> None:
        """Take the slot's hosts off the router, drain and stop its processes (a blue-green
        slot's generations are put to sleep, kept); then stop the supervisor (and routers)
        when nothing else of this state dir runs."""
        d = self._guarded(clearance, target)
        claims = read_claims(d)
        if any(claims.values()):
            write_claims(d, {})
        self._retable(d, claimed_ports(claims))
        for generation, hosts in sorted(claims.items()):
            for host, c in sorted(hosts.items()):
                reporter.line(f"  dropped http://{host}:{c.router_port}/ ({generation})")
        for host in sorted(read_routes(d)):
            self._remove_route(d, host)
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
