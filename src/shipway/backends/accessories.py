"""The protocol part of a backend that runs accessories (spec/accessories.py): which ones
this machine can run, what runs, the links the app gets, and starting one — and what every
backend's servers share: the link's form, the image a container runs, the probe that asks a
server in its own protocol whether it answers.

A part of its own, as generations and sources are: a backend that does not have it refuses
a spec that gives one of its slots an accessory (:func:`accessories_of`, exit 2) — and the
spec is refused before that, when it is read (:data:`shipway.spec.accessories.SUPPORTED`).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from shipway.backends.protocol import Backend, Failure, Reporter
from shipway.backends.volume_status import human_bytes
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.plan.accessories import SeenAccessory
from shipway.plan.model import StartAccessory
from shipway.spec.accessories import SUPPORTED, Accessory
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Secret

#: the database user shipway makes on a Postgres accessory (its superuser)
PG_USER = "shipway"
#: where a container's server listens, by kind (the official images' ports)
SERVER_PORTS = {"postgres": 5432, "redis": 6379}
#: the environment variable naming a registry that mirrors the official images
#: (``registry.example.com/library``: ``postgres:15`` is pulled as
#: ``registry.example.com/library/postgres:15``)
MIRROR_ENV = "SHIPWAY_ACCESSORY_MIRROR"


def link(kind: str, password: str, host: str, port: int, database: str) -> str:
    """The URL an app is given for an accessory (its ``from_accessory`` secret)."""
    secret = urllib.parse.quote(password, safe="")
    if kind == "postgres":
        return f"postgresql://{PG_USER}:{secret}@{host}:{port}/{database}"
    return f"redis://:{secret}@{host}:{port}/0"


@dataclass(frozen=True)
class Credentials:
    """What an accessory's clients need: made once, kept in the target (local: a 0600
    file; docker: its data volume's labels; kubernetes: a Secret)."""

    password: str
    port: int
    database: str

    def link(self, kind: str, host: str = "127.0.0.1") -> str:
        return link(kind, self.password, host, self.port, self.database)

    def to_json(self) -> dict[str, object]:
        return {"password": self.password, "port": self.port, "database": self.database}

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Credentials:
        return cls(str(doc["password"]), int(str(doc["port"])), str(doc["database"]))


def server_image(accessory: Accessory, environ: Mapping[str, str]) -> str:
    """The image a container of ``accessory`` runs: the official one of its kind and major
    version (``postgres:15``, ``redis:7``), or the same name under the mirror
    ``$SHIPWAY_ACCESSORY_MIRROR`` names (a private registry; the tests' images)."""
    name = f"{accessory.kind}:{accessory.version}"
    mirror = environ.get(MIRROR_ENV, "").strip().rstrip("/")
    return f"{mirror}/{name}" if mirror else name


class Stream(Protocol):
    """A connection to a server: a socket, or an SSH channel to a container."""

    def sendall(self, data: bytes) -> Any: ...

    def recv(self, n: int) -> bytes: ...


@dataclass(frozen=True)
class AccessoryStatus:
    """One accessory of a slot as it is: ``state`` ``running`` (its server answers),
    ``starting``, ``down`` (declared, not running) — and what ``status`` shows of it."""

    name: str
    kind: str
    version: str | None
    state: str
    healthy: bool
    digest: str | None = None
    declared: Mapping[str, Any] | None = None
    address: str | None = None
    data_path: str | None = None
    data_bytes: int | None = None
    #: the running server's own version, asked over its protocol (``15.18``, ``7.0.15``)
    server_version: str | None = None
    #: the machine it runs on, where a backend has several (a docker slot's host)
    host: str | None = None

    def seen(self) -> SeenAccessory:
        return SeenAccessory(
            self.name,
            self.kind,
            self.version,
            self.digest,
            self.state in ("running", "starting"),
            dict(self.declared or {}),
        )

    def line(self) -> str:
        health = "healthy" if self.healthy else "not answering"
        size = f", data {human_bytes(self.data_bytes)}" if self.data_bytes is not None else ""
        where = f" on {self.address}" if self.address else ""
        version = self.server_version or self.version
        return f"{self.name}: {self.kind} {version} {self.state} ({health}){where}{size}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "version": self.version,
            "server_version": self.server_version,
            "state": self.state,
            "healthy": self.healthy,
            "address": self.address,
            "data_path": self.data_path,
            "data_bytes": self.data_bytes,
            "host": self.host,
        }


@runtime_checkable
class Accessories(Protocol):
    """What a backend adds that runs accessories (local and docker, this version)."""

    def accessory_problems(self, app: App, slot: Slot) -> list[str]:
        """What this machine cannot run of what the spec declares (a version not
        installed), each with its key and fix; reads only."""
        ...

    def accessories(self, target: Target) -> list[AccessoryStatus]:
        """The slot's accessories as they are (reads only; starts nothing)."""
        ...

    def accessory_links(
        self,
        target: Target,
        declared: Mapping[str, Accessory],
        clearance: Clearance | None,
    ) -> dict[str, Secret]:
        """Each declared accessory's link (a URL with its credentials), by name, and its
        password alone under ``(accessory NAME password)`` (so output masks it alone too).
        With a clearance, the credentials an accessory lacks are made (once: a second
        caller reads the first one's); without one, an accessory without them has none."""
        ...

    def start_accessory(
        self,
        clearance: Clearance,
        target: Target,
        step: StartAccessory,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        """Make it run as the step declares (data made once, never deleted), and wait until
        it answers: its failure, or None."""
        ...


@runtime_checkable
class AccessoryBackups(Protocol):
    """What a backend adds that backs its accessories up and puts a backup back (local,
    docker and kubernetes). Where the file goes, its checksum and the checks before a
    restore are the engine's (:mod:`shipway.backends.backups`): a backend writes the bytes
    and puts them back."""

    def backup_accessory(
        self, target: Target, accessory: Accessory, into: Path, reporter: Reporter
    ) -> tuple[str, str]:
        """A consistent snapshot of the accessory's data written to ``into`` (a partial
        name the caller renames once its checksum is beside it) while the server keeps
        serving: Postgres by the server's own major version of ``pg_dump`` (custom format)
        and never another's; Redis its RDB after a ``BGSAVE``. Returns (the server's
        version, the program that made it). Reads only."""
        ...

    def restore_accessory(
        self,
        clearance: Clearance,
        target: Target,
        accessory: Accessory,
        source: Path,
        reporter: Reporter,
    ) -> str:
        """Make ``source`` (a checked backup of the accessory's kind) the accessory's whole
        data; what was there stays until the restored data is in place and the server
        answers, and is put back when it does not. Returns a line saying what was done."""
        ...


def backups_of(backend: Backend) -> AccessoryBackups:
    """The backend as one that backs accessories up, or an InputError saying it does not."""
    if not isinstance(backend, AccessoryBackups):
        raise InputError(
            f"the {backend.name} backend does not back accessories up in this version of "
            "shipway (hint: use the server's own tools, e.g. pg_dump, against it)"
        )
    return backend


def runs_accessories(backend: Backend) -> bool:
    return isinstance(backend, Accessories)


def accessories_of(backend: Backend) -> Accessories:
    """The backend as one that runs accessories, or an InputError naming those that do."""
    if not isinstance(backend, Accessories):
        where = sorted({b for backends in SUPPORTED.values() for b in backends})
        raise InputError(
            f"the {backend.name} backend does not run accessories in this version of shipway "
            f"(they run on: {', '.join(where)}) (hint: remove [accessories] from the spec for "
            "this slot, or give the app the address of a server you run as a secret)"
        )
    return backend


def link_name(accessory: str) -> str:
    """The name the password alone is masked under (never a placeholder's name)."""
    return f"(accessory {accessory} password)"
