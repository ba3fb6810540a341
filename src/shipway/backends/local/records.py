"""The records the local backend keeps about a slot, typed, and their versioned JSON form.

In ``<app>/<slot>/`` (see :mod:`.dirs`)::

    programs.json   {"version": 1, "programs": {key: ProgramRecord}}     (0600)
    routes.json     {"version": 1, "routes": {host: Route}}
    snapshot.json   {"version": 1, **SnapshotRecord}: the rolling slot's current snapshot
    run/*.env.json  EnvFile: an instance's environment, secrets revealed  (0600)

(``generations.json`` and ``claims.json`` are :mod:`.generations`; ``ports.json`` is
:mod:`.ports`; all follow the same rule.)

Every record file is read and written through :class:`RecordFile`. A file written before
the format carried a version (no ``"version"`` key) is version 1: the same shape. A file of
a newer version than this shipway knows is refused with an error naming it — never misread,
never written over. A record that does not parse is an error naming the file and entry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

from shipway.backends.local.dirs import SlotDirs, read_json, write_json
from shipway.backends.local.render import HealthCheck, ProgramBody
from shipway.errors import BackendError
from shipway.release.artifact import Unit

#: the format version of every record file this shipway writes (and the newest it reads)
VERSION = 1

T = TypeVar("T")


def check_version(path: Path, doc: Mapping[str, Any]) -> None:
    """Refuse a file written in a format newer than this shipway knows."""
    version = doc.get("version", 1)
    if not isinstance(version, int) or not 1 <= version <= VERSION:
        raise BackendError(
            f"{path} is in format version {version!r}, and this shipway reads versions 1 to "
            f"{VERSION} (hint: it was written by a newer shipway: upgrade this one)"
        )


class RecordFile(Generic[T]):
    """One JSON file of named records of one kind: ``{"version": N, key: {name: record}}``."""

    def __init__(
        self,
        key: str,
        parse: Callable[[Any], T],
        dump: Callable[[T], Any],
        mode: int = 0o644,
    ) -> None:
        self.key = key
        self.parse = parse
        self.dump = dump
        self.mode = mode

    def read(self, path: Path) -> dict[str, T]:
        """The records (none when the file does not exist)."""
        doc = read_json(path, {}) or {}
        if not isinstance(doc, dict):
            raise BackendError(f"{path} holds no JSON object")
        check_version(path, doc)
        out: dict[str, T] = {}
        for name, raw in dict(doc.get(self.key) or {}).items():
            try:
                out[str(name)] = self.parse(raw)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise BackendError(
                    f"{path}: {self.key}.{name} cannot be read ({type(exc).__name__}: {exc}) "
                    "(hint: the file was edited by hand? restore it, or remove the entry)"
                ) from exc
        return out

    def write(self, path: Path, records: Mapping[str, T]) -> None:
        doc = {"version": VERSION, self.key: {n: self.dump(r) for n, r in records.items()}}
        write_json(path, doc, self.mode)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class Instance:
    """One supervised instance of a program: its supervisord name, loopback port, env file
    (0600: secret values), start counter (written by the launcher) and log."""

    name: str
    port: int
    env: Path
    counter: Path
    log: Path
    #: starts before a ``start`` left it running: the health gate does not count them
    starts_before: int = 0

    @classmethod
    def new(
        cls, d: SlotDirs, prefix: str, process: str, deployment_id: str, n: int, port: int
    ) -> Instance:
        stem = f"{process}.{deployment_id}.{n}"
        return cls(
            name=f"{prefix}.{n}",
            port=port,
            env=d.run / f"{stem}.env.json",
            counter=d.run / f"{stem}.starts",
            log=d.logs / f"{stem}.log",
        )

    @property
    def upstream(self) -> str:
        """How the router reaches it."""
        return f"127.0.0.1:{self.port}"

    def starts(self) -> int:
        """How many times it was started (the launcher counts each start)."""
        try:
            return int(self.counter.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def started_at(self) -> float | None:
        """When it was last started: the launcher writes its counter then, last before the
        command runs."""
        try:
            return self.counter.stat().st_mtime
        except OSError:
            return None

    def forget_files(self) -> None:
        """Its env file and start counter go (its log stays)."""
        for path in (self.env, self.counter):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Instance:
        return cls(
            name=str(doc["name"]),
            port=int(doc["port"]),
            env=Path(doc["env"]),
            counter=Path(doc["counter"]),
            log=Path(doc["log"]),
            starts_before=int(doc.get("starts_before", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "port": self.port,
            "env": str(self.env),
            "counter": str(self.counter),
            "log": str(self.log),
        }
        if self.starts_before:
            doc["starts_before"] = self.starts_before
        return doc


@dataclass(frozen=True)
class ProgramRecord:
    """A program of the slot (one process of one release): what runs where, recorded before
    anything starts, so a ``kill -9`` never leaves a program nobody knows about.

    A generation's program (``generation`` set) also keeps what it needs to wake without
    its unit: its ``command``, its ``env_template`` (0600) and the ``replicas`` it runs
    (asleep: 0, no instance)."""

    unit: str | None  # the digest of the unit it was applied from
    process: str
    deployment_id: str
    release: str | None  # "r<N>"
    snapshot: Path  # the directory it runs in
    snapshot_digest: str
    health: HealthCheck
    instances: tuple[Instance, ...]
    created_at: str
    generation: str | None = None
    command: tuple[str, ...] = ()
    env_template: Path | None = None
    replicas: int = 0

    @classmethod
    def of(
        cls,
        unit: Unit,
        body: ProgramBody,
        snapshot: Path,
        instances: Iterable[Instance],
        created_at: str,
    ) -> ProgramRecord:
        """The record of a program applied from ``unit`` (a generation's adds its own)."""
        return cls(
            unit=unit.digest,
            process=body.process,
            deployment_id=body.deployment_id,
            release=body.release,
            snapshot=snapshot,
            snapshot_digest=body.snapshot,
            health=body.health,
            instances=tuple(instances),
            created_at=created_at,
        )

    @property
    def revision(self) -> int:
        """The revision of its release (0 when unknown), for ordering."""
        digits = (self.release or "r0")[1:]
        return int(digits) if digits.isdigit() else 0

    @property
    def ports(self) -> list[int]:
        return [i.port for i in self.instances]

    @property
    def upstreams(self) -> list[str]:
        return [i.upstream for i in self.instances]

    def env_files(self) -> list[Path]:
        """Every file holding its environment (secret values): the instances' and template."""
        files = [i.env for i in self.instances]
        return files + ([self.env_template] if self.env_template else [])

    def with_instances(
        self, instances: Iterable[Instance], replicas: int | None = None
    ) -> ProgramRecord:
        kept = tuple(instances)
        return replace(
            self, instances=kept, replicas=self.replicas if replicas is None else replicas
        )

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ProgramRecord:
        template = doc.get("env_template")
        return cls(
            unit=_opt_str(doc.get("unit")),
            process=str(doc["process"]),
            deployment_id=str(doc["deployment_id"]),
            release=_opt_str(doc.get("release")),
            snapshot=Path(doc["snapshot"]),
            snapshot_digest=str(doc["snapshot_digest"]),
            health=HealthCheck.of(doc.get("health")),
            instances=tuple(Instance.from_json(i) for i in doc.get("instances", [])),
            created_at=str(doc.get("created_at", "")),
            generation=_opt_str(doc.get("generation")) or None,
            command=tuple(str(w) for w in doc.get("command", [])),
            env_template=Path(template) if template else None,
            replicas=int(doc.get("replicas", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "unit": self.unit,
            "process": self.process,
            "deployment_id": self.deployment_id,
            "release": self.release,
            "snapshot": str(self.snapshot),
            "snapshot_digest": self.snapshot_digest,
            "health": self.health.to_json(),
            "instances": [i.to_json() for i in self.instances],
            "created_at": self.created_at,
        }
        if self.generation:
            doc.update(
                generation=self.generation,
                command=list(self.command),
                env_template=str(self.env_template) if self.env_template else None,
                replicas=self.replicas,
            )
        return doc


@dataclass(frozen=True)
class Route:
    """A host pointed at a program through the router on one port, and since when (the
    router serves a host from its newest claim: :mod:`.routetable`). A rolling slot's route
    (``routes.json``) names the unit it was applied from; a generation's claim of a host
    (``claims.json``) has none."""

    program: str
    process: str
    router_port: int
    since: float = 0.0
    unit: str | None = None
    #: a canary beside the program: {"id", "program", "weight"} (backends/local/canary.py)
    canary: Mapping[str, Any] | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Route:
        canary = doc.get("canary")
        return cls(
            program=str(doc["program"]),
            process=str(doc.get("process", "")),
            router_port=int(doc["router_port"]),
            since=float(doc.get("since") or 0.0),
            unit=_opt_str(doc.get("unit")),
            canary=dict(canary) if isinstance(canary, Mapping) else None,
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "program": self.program,
            "process": self.process,
            "router_port": self.router_port,
            "since": self.since,
        }
        if self.unit is not None:
            doc["unit"] = self.unit
        if self.canary is not None:
            doc["canary"] = dict(self.canary)
        return doc


@dataclass(frozen=True)
class SnapshotRecord:
    """A snapshot in use: the unit that made it, its revision, its directory under
    ``releases/`` and its content digest."""

    unit: str | None
    revision: int
    dir: str
    digest: str

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> SnapshotRecord:
        return cls(
            unit=_opt_str(doc.get("unit")),
            revision=int(doc.get("revision") or 0),
            dir=str(doc.get("dir") or ""),
            digest=str(doc.get("digest") or ""),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "revision": self.revision,
            "dir": self.dir,
            "digest": self.digest,
        }


PROGRAMS: RecordFile[ProgramRecord] = RecordFile(
    "programs", ProgramRecord.from_json, ProgramRecord.to_json, 0o600
)
ROUTES: RecordFile[Route] = RecordFile("routes", Route.from_json, Route.to_json)


def read_programs(d: SlotDirs) -> dict[str, ProgramRecord]:
    return PROGRAMS.read(d.programs)


def write_programs(d: SlotDirs, programs: Mapping[str, ProgramRecord]) -> None:
    PROGRAMS.write(d.programs, programs)


def read_routes(d: SlotDirs) -> dict[str, Route]:
    return ROUTES.read(d.routes)


def write_routes(d: SlotDirs, routes: Mapping[str, Route]) -> None:
    ROUTES.write(d.routes, routes)


def read_current_snapshot(d: SlotDirs) -> SnapshotRecord | None:
    doc = read_json(d.current_snapshot, None)
    if not isinstance(doc, dict):
        return None
    check_version(d.current_snapshot, doc)
    return SnapshotRecord.from_json(doc)


def write_current_snapshot(d: SlotDirs, current: SnapshotRecord) -> None:
    write_json(d.current_snapshot, {"version": VERSION, **current.to_json()})


@dataclass(frozen=True)
class EnvFile:
    """The environment an instance runs with (or a generation program's template of it),
    secrets revealed — so 0600, and read only by the launcher (:mod:`.launch`) and by the
    masker. ``secret_names``: which variables hold secrets (never expanded in argv)."""

    env: Mapping[str, str]
    secret_names: tuple[str, ...]

    @classmethod
    def of(cls, env: Mapping[str, str], secrets: Iterable[str]) -> EnvFile:
        return cls(dict(env), tuple(sorted(n for n in secrets if n in env)))

    def with_port(self, port: int) -> EnvFile:
        if not port:  # a process without a port: no PORT
            return self
        return EnvFile({**self.env, "PORT": str(port)}, self.secret_names)

    def secret_values(self) -> list[str]:
        return [self.env[n] for n in self.secret_names if n in self.env]

    def write(self, path: Path, log: Path | None = None) -> None:
        """The file the launcher reads; ``log``: the instance's log, which its stamper appends
        to once supervisord no longer reads its output (launch.py)."""
        doc: dict[str, object] = {"env": dict(self.env), "secret_names": list(self.secret_names)}
        if log is not None:
            doc["log"] = str(log)
        write_json(path, doc, 0o600)

    @classmethod
    def read(cls, path: Path) -> EnvFile | None:
        """The file's environment; None when it does not exist (BackendError: unreadable)."""
        doc = read_json(path, None)
        if not isinstance(doc, dict):
            return None
        try:
            env = {str(k): str(v) for k, v in dict(doc["env"]).items()}
            names = tuple(str(n) for n in doc.get("secret_names", []))
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(f"{path} is not an env file: {exc}") from exc
        return cls(env, names)
