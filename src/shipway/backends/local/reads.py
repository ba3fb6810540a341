"""What the local backend tells the engine without changing anything: the image (a source
directory named by content), what runs, the records, status, diff, logs.

Reads never start supervisord or the router: with the daemon down, nothing runs, and they
say so (``plan`` and ``status`` start no subprocess).
"""

from __future__ import annotations

import os
from pathlib import Path

from shipway.backends.appfiles import looks_like_database
from shipway.backends.local import preflight, render, snapshot
from shipway.backends.local.generations import read_claims, read_generations, serving
from shipway.backends.local.health import LocalHealth
from shipway.backends.local.logview import LocalLogs
from shipway.backends.local.records import read_current_snapshot, read_programs, read_routes
from shipway.backends.local.render import RouteBody
from shipway.backends.local.state import KEEP_SNAPSHOTS
from shipway.backends.local.supervisor import RUNNING_STATES, state_of
from shipway.backends.local.volumes import LocalVolumes
from shipway.backends.protocol import ProcessStatus, ResolvedImage
from shipway.errors import InputError
from shipway.plan.model import (
    ApplyObject,
    Observed,
    ObservedUnit,
    Plan,
    PointHost,
    Remove,
    UnitState,
)
from shipway.release.model import ImageMeta, Release
from shipway.spec.model import App, Target


def _human(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


class LocalReads(LocalLogs, LocalHealth, LocalVolumes):
    """What the backend reads (the protocol's Reads); nothing here writes a file or
    starts a process."""

    def resolve_image(self, target: Target, app: App, ref: str | None) -> ResolvedImage:
        """The source a release runs, named ``local:<dir>@sha256:<content digest>``.

        No ref: the app's source directory. A ref with a digest (promotion, restart,
        a recorded release): a kept snapshot with that digest, else the directory if it
        still hashes the same. A ref without one: that directory (``deploy --image DIR``).
        """
        self._serves(target)
        preflight.check_router_port(app, self.slot, self.router(self.router_port))
        if ref is None:
            return self._resolve_dir(app, app.source_dir.resolve())
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
            if source.is_dir() and snapshot.digest(source, self._app_files(app, source)) == digest:
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
        return self._resolve_dir(app, source)

    def _resolve_dir(self, app: App, source: Path) -> ResolvedImage:
        try:
            paths = self._app_files(app, source).walk(source)
            digest = snapshot.digest_of_paths(source, paths)
        except OSError as exc:
            raise InputError(f"cannot read the source directory {source}: {exc}") from exc
        # what a snapshot copies of it that is a database (db.sqlite3 beside the code)
        found = [p for p in paths if not p.endswith("/") and looks_like_database(source / p)]
        return ResolvedImage(
            ref=f"local:{source}@{digest}",
            digest=digest,
            meta=ImageMeta("local", str(source)),
            databases=tuple(found),
        )

    def observe(self, target: Target) -> Observed:
        d = self.dirs(target)
        units: list[ObservedUnit] = self._observe_volumes(d)
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
                    # a canary beside it: not the route any release recorded (an undo or
                    # the recovery of a killed canary applies it again: 100 % to one release)
                    digest=route.unit if route.canary is None else None,
                    process=route.process,
                    phase=2,
                )
            )
        return Observed.of(units)

    def read_records(self, target: Target) -> list[Release]:
        return self._records(self.dirs(target))

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
                            "port": inst.port or None,  # None: it declares no port
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
        notes = preflight.unresolved_hosts(
            self.app.in_slot(self.slot.name), self.slot, self.router_port
        )
        return (["changes on this machine:", *lines] if lines else []) + notes

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
