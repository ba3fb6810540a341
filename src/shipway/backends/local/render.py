"""PURE: what a release of an app means on this machine. No I/O, no subprocess.

Units, and why they are cut this way:

* ``snapshot`` (phase 0): the source directory copied into ``releases/r<N>`` with the
  config files written in it. One key for the slot: each release updates it.
* ``program/<process>@<deployment id>`` (phase 1, waits, does not switch): the supervised
  instances of one process type. The key carries the deployment id, so a new release's
  programs are *new units* that start beside the old ones (the old keep serving until the
  route moves), and a targeted restart that keeps a process's id keeps its unit
  byte-identical — untouched, same pid. Programs name their snapshot by content digest,
  not by revision, so a restart's fresh program runs in the snapshot its siblings run in.
* ``route/<host>`` (phase 2, switches): a host on the router pointing at a program by key.
  Ports are not here: they are handed out when a program starts, and the router resolves
  program -> ports, so a plan never depends on which ports happen to be free.

* ``volume/<name>`` (phase 0): a volume's directory in the state dir. It belongs to the
  slot, not to the release or a generation: one key for the slot, never removed by a plan.
  Each snapshot names the volumes it places (``path`` inside it, a symlink to the directory).

A release of a blue-green slot is a *generation* (``release.generation``): its units are
``gen/<generation>/snapshot`` (its own snapshot, kept as long as the generation) and
``gen/<generation>/program/<process>@<deployment id>``, labelled with the generation, and
there are no route units — hosts move between generations by ``PointHost``/``DropHost``.

Secret values never appear: env and files carry ``${secrets.NAME}`` placeholders that the
backend reveals only when it writes the env file or config file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shipway.release.artifact import PREREQUISITE, ROUTING, WORKLOAD, Artifact, Unit
from shipway.release.model import Release
from shipway.spec.model import App, Healthcheck, Process, Slot
from shipway.spec.secrets import names_in, placeholder

DEFAULT_SLOT = "local"
#: without a declared healthcheck: a process with a port is ready when the port accepts
#: connections; one without must stay up this long (without restarting).
TCP_CHECK = {"mode": "tcp", "interval": 0.1, "timeout": 1.0, "attempts": 300, "initial_delay": 0.0}
MIN_UPTIME = 1.0


def default_host(app: str, slot: str) -> str:
    """``<app>.localhost`` for the ``local`` slot, ``<slot>.<app>.localhost`` for others:
    every ``*.localhost`` name reaches loopback, and no two slots of an app share one."""
    return f"{app}.localhost" if slot == DEFAULT_SLOT else f"{slot}.{app}.localhost"


def program_key(process: str, deployment_id: str, generation: str | None = None) -> str:
    prefix = f"gen/{generation}/" if generation else ""
    return f"{prefix}program/{process}@{deployment_id}"


def hosts_of(app: App, slot: Slot) -> list[tuple[str, str]]:
    """(host, process) pairs the app serves in the slot: its routes, else the default host
    of its ``web`` process, else none."""
    routes = [(r.host, r.process) for r in app.routes]
    if not routes and "web" in app.processes:
        routes = [(default_host(app.name, slot.name), "web")]
    return routes


def health_of(process: Process) -> dict[str, Any]:
    hc = process.healthcheck
    if hc is None:
        if process.port is not None:
            return dict(TCP_CHECK)
        return {"mode": "uptime", "initial_delay": MIN_UPTIME}
    if hc.path is None:
        return {"mode": "uptime", "initial_delay": max(hc.initial_delay, MIN_UPTIME)}
    return _http(hc)


def _http(hc: Healthcheck) -> dict[str, Any]:
    return {
        "mode": "http",
        "path": hc.path,
        "interval": hc.interval,
        "timeout": hc.timeout,
        "attempts": hc.attempts,
        "initial_delay": hc.initial_delay,
    }


@dataclass(frozen=True)
class HealthCheck:
    """When an instance counts as ready (the gate is :mod:`.health`): ``http``, a GET of
    ``path`` answering 2xx/3xx; ``tcp``, its port accepting connections; ``uptime``, up for
    ``initial_delay`` seconds since its only start."""

    mode: str
    path: str | None = None
    interval: float = 1.0
    timeout: float = 1.0
    attempts: int = 30
    initial_delay: float = 0.0

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> HealthCheck:
        """From its JSON form (:func:`health_of`); none at all: stay up ``MIN_UPTIME``."""
        if not doc:
            return cls("uptime", initial_delay=MIN_UPTIME)
        mode = str(doc.get("mode", "uptime"))
        path = doc.get("path")
        return cls(
            mode=mode,
            path=str(path) if path is not None else None,
            interval=float(doc.get("interval", 1.0)),
            timeout=float(doc.get("timeout", 1.0)),
            attempts=int(doc.get("attempts", 30)),
            initial_delay=float(doc.get("initial_delay", MIN_UPTIME if mode == "uptime" else 0.0)),
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"mode": self.mode, "initial_delay": self.initial_delay}
        if self.mode != "uptime":
            doc.update(interval=self.interval, timeout=self.timeout, attempts=self.attempts)
        if self.path is not None:
            doc["path"] = self.path
        return doc


# -- what the units' bodies say, read back by the backend when it applies them ------------


@dataclass(frozen=True)
class ConfigFileBody:
    path: str
    content: str  # with ${secrets.NAME} placeholders
    mode: int


@dataclass(frozen=True)
class SnapshotBody:
    revision: int
    digest: str
    source: str | None
    files: tuple[ConfigFileBody, ...]
    volumes: tuple[tuple[str, str], ...] = ()  # (name, path inside the snapshot)

    @classmethod
    def of(cls, unit: Unit) -> SnapshotBody:
        b = unit.body
        files = tuple(
            ConfigFileBody(str(f["path"]), str(f["content"]), int(str(f["mode"]), 8))
            for f in b.get("files", [])
        )
        source = b.get("source")
        volumes = tuple((str(v["name"]), str(v["path"])) for v in b.get("volumes", []))
        return cls(
            int(b["revision"]), str(b["digest"]), str(source) if source else None, files, volumes
        )

    @property
    def excluded(self) -> list[str]:
        """What the snapshot's copy (and digest) leaves out: the files the spec writes into
        it, and the places of its volumes."""
        return [f.path for f in self.files] + [path for _, path in self.volumes]


def volume_unit(name: str) -> Unit:
    """The slot's unit of a volume: its body is its name only, so it never changes (the
    paths it is placed at are the snapshots')."""
    return Unit(key=f"volume/{name}", kind="volume", phase=PREREQUISITE, body={"name": name})


def excluded_paths(app: App) -> list[str]:
    """What a snapshot of ``app`` leaves out of its copy and digest: its config files and
    the places of its volumes (they are the volumes' own)."""
    return [f.path for f in app.files] + [v.path for v in app.volumes.values()]


@dataclass(frozen=True)
class ProgramBody:
    process: str
    deployment_id: str
    release: str | None
    command: tuple[str, ...]
    replicas: int
    snapshot: str  # the content digest of the snapshot it runs in
    env: Mapping[str, str]  # with ${secrets.NAME} placeholders
    health: HealthCheck
    generation: str | None
    environment: str | None = None  # the dependency environment it runs with (a directory)
    listens: bool = True  # False: it declares no port, and is given none

    @classmethod
    def of(cls, unit: Unit) -> ProgramBody:
        b = unit.body
        release, generation = b.get("release"), b.get("generation")
        environment = b.get("environment")
        return cls(
            process=str(b["process"]),
            deployment_id=str(b["deployment_id"]),
            release=str(release) if release is not None else None,
            command=tuple(str(w) for w in b["command"]),
            replicas=int(b["replicas"]),
            snapshot=str(b["snapshot"]),
            env={str(k): str(v) for k, v in dict(b["env"]).items()},
            health=HealthCheck.of(b.get("health")),
            generation=str(generation) if generation else None,
            environment=str(environment) if environment else None,
            listens=b.get("port", True) is not False,
        )


@dataclass(frozen=True)
class RouteBody:
    host: str
    process: str
    program: str  # the key of the program it points at
    router_port: int

    @classmethod
    def of(cls, unit: Unit) -> RouteBody:
        b = unit.body
        return cls(str(b["host"]), str(b["process"]), str(b["program"]), int(b["router_port"]))


def render(app: App, slot: Slot, release: Release, router_port: int) -> Artifact:
    digest = release.digest or ""
    source = release.image_meta.working_dir if release.image_meta else None
    files = [
        {
            "path": f.path,
            "content": f.content,
            "mode": "0600" if f.secret_bearing or names_in(f.content) else "0644",
        }
        for f in app.files
    ]
    gen = release.generation
    labelled: dict[str, Any] = {"generation": gen} if gen else {}  # rolling bodies unchanged
    built = release.build
    if built is not None and built.kind == "environment":  # bodies without one: unchanged
        labelled_programs = {**labelled, "environment": built.what}
    else:
        labelled_programs = labelled
    placed: dict[str, Any] = {}
    if app.volumes:  # absent otherwise: the bodies of apps without volumes unchanged
        placed["volumes"] = [
            {"name": v.name, "path": v.path} for _, v in sorted(app.volumes.items())
        ]
    units = [volume_unit(name) for name in sorted(app.volumes)]
    units.append(
        Unit(
            key=f"gen/{gen}/snapshot" if gen else "snapshot",
            kind="snapshot",
            phase=PREREQUISITE,
            generation=gen,
            body={
                "revision": release.revision,
                "digest": digest,
                "source": source,
                "files": files,
                **labelled,
                **placed,
            },
        )
    )
    base_env: dict[str, str] = {**app.env, **{n: placeholder(n) for n in app.secrets}}
    for name, process in app.processes.items():
        dep_id = release.deployment_ids.get(name, "")
        env = {
            **base_env,
            "SHIPWAY_APP": app.name,
            "SHIPWAY_SLOT": slot.name,
            "SHIPWAY_PROCESS": name,
            "SHIPWAY_RELEASE": f"r{release.revision}",
            "SHIPWAY_DEPLOYMENT_ID": dep_id,
        }
        units.append(
            Unit(
                key=program_key(name, dep_id, gen),
                kind="program",
                process=name,
                generation=gen,
                phase=WORKLOAD,
                waits=True,
                switches=False,
                body={
                    "process": name,
                    "deployment_id": dep_id,
                    "release": f"r{release.revision}",
                    "command": list(process.command or ()),
                    "replicas": process.replicas,
                    "snapshot": digest,
                    "env": env,
                    "health": health_of(process),
                    # a process that declares no port gets none (no PORT, no port held)
                    **({"port": False} if process.port is None else {}),
                    **labelled_programs,
                },
            )
        )
    if gen:  # a generation is routed by PointHost, never by a unit
        return Artifact(tuple(units))
    for host, process_name in hosts_of(app, slot):
        dep_id = release.deployment_ids.get(process_name, "")
        units.append(
            Unit(
                key=f"route/{host}",
                kind="route",
                process=process_name,
                phase=ROUTING,
                switches=True,
                body={
                    "host": host,
                    "process": process_name,
                    "program": program_key(process_name, dep_id),
                    "router_port": router_port,
                },
            )
        )
    return Artifact(tuple(units))
