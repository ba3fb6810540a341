"""Programs: the supervised instances of one process of one release, started, scaled,
drained and stopped.

A program is recorded (``programs.json``) before anything of it starts and its ports come
from the one port table (:mod:`.ports`), so a ``kill -9`` at any point leaves a program the
next run can see and stop, never an orphan. An instance's secrets are in its env file
(0600), never in a command line. Stopping a program drains its in-flight requests through
the router first — except when a changed unit is re-applied under the same key, which
replaces its program in place.

A generation's program is a record and an env template; its instances come and go by
scale (asleep: none). Removing one program of a generation moves the hosts it serves to
its newest sibling first; forgetting a generation stops all its programs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from shipway.backends.local import masks, snapshot
from shipway.backends.local.dirs import SlotDirs, private_dir, private_log, private_logs
from shipway.backends.local.generations import (
    read_claims,
    read_generations,
    write_claims,
    write_generations,
)
from shipway.backends.local.ports import owner_prefix
from shipway.backends.local.records import (
    EnvFile,
    Instance,
    ProgramRecord,
    read_programs,
    write_programs,
)
from shipway.backends.local.render import ProgramBody
from shipway.backends.local.routes import LocalRoutes
from shipway.backends.local.state import DRAIN_TIMEOUT, LAUNCHER, now, now_precise
from shipway.backends.local.supervisor import RUNNING_STATES, program_conf, state_of
from shipway.backends.protocol import Reporter
from shipway.errors import BackendError, CleanupFailed
from shipway.release.artifact import Unit
from shipway.spec.model import Target
from shipway.spec.secrets import Secret


class LocalPrograms(LocalRoutes):
    """Program instances: start, scale, drain, stop."""

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
        # no port for a process that declares none (0 in its record: no PORT, none held)
        ports = self._fresh_ports(d, body.replicas, prefix) if body.listens else [0] * body.replicas
        private_dir(d.run)
        private_logs(d.logs)
        instances = tuple(
            Instance.new(d, prefix, body.process, body.deployment_id, n, port)
            for n, port in enumerate(ports)
        )
        # Recorded before anything starts: a kill -9 from here on leaves a program the
        # next run can see (and stop), never an orphan nobody knows about.
        programs[unit.key] = ProgramRecord.of(unit, body, snap, instances, now())
        write_programs(d, programs)
        env = self._env_file(body, secrets)
        masks.remember(d, env.secret_values())  # its log may hold them after it is gone
        self.supervisor.ensure()
        with contextlib.suppress(BackendError):
            self.router(self.router_port).ensure(wait=False)  # warm up while we start
        for inst in instances:
            self._start_instance(inst, env, body.command, snap)
        if not body.listens:
            count = f"{len(ports)} instance{'s' if len(ports) != 1 else ''}" if ports else ""
            what = f"{count or 'no instances'}, no port"
            reporter.line(f"  {body.process} {body.release} starting ({what})")
        else:
            ports_text = ", ".join(str(p) for p in ports) or "no instances"
            reporter.line(f"  {body.process} {body.release} starting on 127.0.0.1:{ports_text}")
        self._refresh_tables(d, reporter, only_program=unit.key)

    def _start_instance(
        self, inst: Instance, env: EnvFile, command: Sequence[str], snap: Path
    ) -> None:
        """Write one instance's env file (0600), reset its start counter and (re)add it to
        supervisord, which starts it."""
        env.with_port(inst.port).write(inst.env, log=inst.log)
        with contextlib.suppress(FileNotFoundError):
            inst.counter.unlink()
        private_log(inst.log)  # supervisord appends to it: it keeps this mode
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
        masks.remember(d, env.secret_values())
        private_dir(d.run)
        private_logs(d.logs)
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
            private_logs(d.logs)
            template = d.run / f"{body.process}.{body.deployment_id}.env.json"
            env = self._env_file(body, secrets)
            masks.remember(d, env.secret_values())
            env.write(template)
            rec = ProgramRecord.of(unit, body, snap, (), now_precise())
            self._save_program(
                d,
                unit.key,
                replace(rec, generation=generation, command=body.command, env_template=template),
            )
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
        listens = not instances or any(i.port for i in instances)  # 0: declares no port
        ports = self._fresh_ports(d, len(fresh), prefix) if listens else [0] * len(fresh)
        new = [
            Instance.new(d, prefix, rec.process, rec.deployment_id, n, port)
            for n, port in zip(fresh, ports, strict=True)
        ]
        instances += new
        self._save_program(d, key, rec.with_instances(instances, replicas))
        self.supervisor.ensure()
        infos = self.supervisor.info()
        starting = [
            inst
            for inst in instances
            if inst in new or state_of(infos.get(inst.name)) not in RUNNING_STATES
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

    def _fresh_ports(self, d: SlotDirs, count: int, owner: str) -> list[int]:
        """Ports for new instances of the slot, once the slot's entries in the port table are
        what its records hold: ports a killed run was given but never recorded come back.
        (Under the slot's lock, and every allocation is recorded before the next.)"""
        recorded = {
            i.port: i.name.rsplit(".", 1)[0]
            for rec in read_programs(d).values()
            for i in rec.instances
            if i.port  # 0: an instance without a port holds none
        }
        self.ports.rebuild(owner_prefix(d.app, d.slot), recorded)
        return self.ports.allocate(count, owner)

    def _remove_instances(self, instances: Iterable[Instance]) -> None:
        """Stop instances (already out of the router), forget their files, free their ports."""
        gone = list(instances)
        for inst in gone:
            self.supervisor.remove(inst.name)
            inst.forget_files()
        self.ports.release(i.port for i in gone if i.port)

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
