"""The declarations: an app, its processes and routes, and the slots it runs in.

These types are produced only by :func:`shipway.spec.load` (or :func:`parse`), which
validates everything first; code past that point never re-checks input.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from shipway.errors import UnknownSlot
from shipway.spec.accessories import Accessory
from shipway.spec.canary import Canary
from shipway.spec.freeze import Window
from shipway.spec.notify import Receiver
from shipway.spec.secrets import Secret, SecretRef
from shipway.spec.source import Source
from shipway.spec.tls import Acme, RouteTls, route_json
from shipway.spec.volumes import Volume

BackendName = Literal["local", "docker", "kubernetes"]
Role = Literal["production", "staging", "test", "preview"]
Strategy = Literal["rolling", "blue-green", "canary"]
ImageType = Literal["dockerfile", "herokuish", "pack"]

BACKENDS: tuple[BackendName, ...] = ("local", "docker", "kubernetes")
ROLES: tuple[Role, ...] = ("production", "staging", "test", "preview")
STRATEGIES: tuple[Strategy, ...] = ("rolling", "blue-green", "canary")
IMAGE_TYPES: tuple[ImageType, ...] = ("dockerfile", "herokuish", "pack")


@dataclass(frozen=True)
class Healthcheck:
    """How a process proves it is ready. ``path`` None: it must stay up for ``initial_delay``."""

    path: str | None = "/up"
    interval: float = 1.0
    timeout: float = 2.0
    attempts: int = 30
    initial_delay: float = 0.0


@dataclass(frozen=True)
class Resources:
    cpu_request: str | None = None
    memory_request: str | None = None
    cpu_limit: str | None = None
    memory_limit: str | None = None


@dataclass(frozen=True)
class Process:
    name: str
    command: tuple[str, ...] | None = None
    port: int | None = None
    replicas: int = 1
    healthcheck: Healthcheck | None = None
    resources: Resources = field(default_factory=Resources)


@dataclass(frozen=True)
class ConfigFile:
    """A file written beside the processes. Secret-bearing files are written mode 0600."""

    path: str
    content: str
    secrets: tuple[str, ...] = ()

    @property
    def secret_bearing(self) -> bool:
        return bool(self.secrets)


@dataclass(frozen=True)
class Route:
    host: str
    process: str
    port: int | None = None
    tls_secret: str | None = None  # kubernetes: a TLS Secret's name
    tls: RouteTls | None = None  # docker: "auto" (ACME) or a certificate from secrets


@dataclass(frozen=True)
class DockerHost:
    """A Docker engine address (``unix://…`` or ``ssh://user@host[:port]``, optionally
    followed by the engine's socket on the host: ``…/var/run/docker.sock``) and its roles."""

    url: str
    processes: tuple[str, ...] | None = None
    #: the IP address the slot's other hosts reach this one at (an accessory's port is
    #: published there only); None: an ssh:// host's own address, a unix:// host has none
    address: str | None = None

    def runs(self, process: str) -> bool:
        return self.processes is None or process in self.processes


@dataclass(frozen=True)
class BuildSettings:
    """How a release builds what it runs (``[build]``, and ``[app] build``).

    Docker and Kubernetes: the image is built from ``dockerfile`` (relative to ``context``,
    itself relative to the app's directory) with ``args``, on the engine at ``host`` (None:
    ``DOCKER_HOST``, else the default socket). Local: the dependency environment uses
    ``python`` (a version or a path; None: the interpreter shipway runs on); ``command``
    replaces detection; ``enabled`` False builds nothing."""

    dockerfile: str = "Dockerfile"
    context: str = "."
    args: Mapping[str, str] = field(default_factory=dict)
    host: str | None = None
    python: str | None = None
    command: tuple[str, ...] | None = None
    enabled: bool = True


@dataclass(frozen=True)
class Target:
    """Exactly one app in exactly one slot: what a clearance covers and a backend acts on."""

    app: str
    slot: str
    backend: BackendName

    def __str__(self) -> str:
        return f"{self.app}/{self.slot}"


@dataclass(frozen=True)
class Slot:
    name: str
    backend: BackendName = "local"
    role: Role = "test"
    guarded: bool = False
    promotes_to: str | None = None
    strategy: Strategy = "rolling"
    sleep_after: float = 10.0
    history_limit: int = 10
    # kubernetes
    context: str | None = None
    namespace: str | None = None
    source: Source | None = None  # the team's manifests or a chart (spec/source.py)
    # docker
    hosts: tuple[DockerHost, ...] = ()
    known_hosts: str | None = None
    proxy_image: str | None = None
    proxy_port: int | None = None
    #: docker: how long old containers may drain; kubernetes: a serving pod's preStop sleep
    drain_timeout: float | None = None
    #: HTTPS (spec/tls.py): the ACME CA of ``tls = "auto"`` routes, the HTTPS port, HSTS
    acme: Acme | None = None
    proxy_tls_port: int | None = None
    hsts: bool = False
    #: hosts rolled at a time (Kamal's boot limit); None: every host at once
    batch: int | None = None
    # local
    state_dir: str | None = None
    router_port: int | None = None
    # overrides
    replicas: Mapping[str, int] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    routes: tuple[Route, ...] | None = None
    #: how a canary walks its steps (spec/canary.py); set only with strategy = "canary"
    canary: Canary | None = None
    #: declared freeze windows (spec/freeze.py) and notification receivers (spec/notify.py)
    freeze: tuple[Window, ...] = ()
    notify: tuple[Receiver, ...] = ()

    @property
    def needs_confirmation(self) -> bool:
        """Guarded and production slots need the slot's name typed back before any change."""
        return self.guarded or self.role == "production"


@dataclass(frozen=True)
class SlotRegistry:
    app: str
    slots: Mapping[str, Slot]

    def __iter__(self) -> Iterator[Slot]:
        return iter(self.slots.values())

    def __contains__(self, name: object) -> bool:
        return name in self.slots

    def names(self) -> list[str]:
        return list(self.slots)

    def get(self, name: str) -> Slot:
        try:
            return self.slots[name]
        except KeyError:
            known = ", ".join(self.slots) or "(none)"
            raise UnknownSlot(
                f"no slot named {name!r} in the spec (slots: {known}; hint: add [slots.{name}])"
            ) from None

    def target(self, name: str) -> Target:
        slot = self.get(name)
        return Target(app=self.app, slot=slot.name, backend=slot.backend)

    def chain(self, name: str) -> list[str]:
        """The promotion chain starting at ``name`` (validation guarantees it ends)."""
        out = [name]
        nxt = self.get(name).promotes_to
        while nxt is not None and nxt not in out:
            out.append(nxt)
            nxt = self.slots[nxt].promotes_to
        return out


#: how long a release command may run unless ``app.release_timeout`` says otherwise
DEFAULT_RELEASE_TIMEOUT = 300.0
#: how long a local build (the app's environment) may run unless ``app.build_timeout`` says
DEFAULT_BUILD_TIMEOUT = 1800.0


@dataclass(frozen=True)
class App:
    name: str
    processes: Mapping[str, Process]
    slots: SlotRegistry
    image: str | None = None
    image_type: ImageType | None = None
    release_command: tuple[str, ...] | None = None
    #: seconds the release command may run before it is stopped (None: the default)
    release_timeout: float | None = None
    #: seconds a build may run before it is stopped (None: the default)
    build_timeout: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, SecretRef] = field(default_factory=dict)
    files: tuple[ConfigFile, ...] = ()
    routes: tuple[Route, ...] = ()
    volumes: Mapping[str, Volume] = field(default_factory=dict)
    #: backing services beside the app (spec/accessories.py): the slot's, not a release's
    accessories: Mapping[str, Accessory] = field(default_factory=dict)
    source_dir: Path = Path(".")
    spec_file: Path = Path("shipway.toml")
    build: BuildSettings = field(default_factory=BuildSettings)
    #: the env files read into ``env`` (relative to ``source_dir``): never in a snapshot
    #: or an image, since they may hold the values of secrets
    env_files: tuple[str, ...] = ()

    @property
    def release_deadline(self) -> float:
        """Seconds the release command may run: ``release_timeout``, else the default."""
        return DEFAULT_RELEASE_TIMEOUT if self.release_timeout is None else self.release_timeout

    @property
    def build_deadline(self) -> float:
        """Seconds a build may run: ``build_timeout``, else the default."""
        return DEFAULT_BUILD_TIMEOUT if self.build_timeout is None else self.build_timeout

    def probe_host(self, process: str) -> str | None:
        """The ``Host`` a health check of ``process`` sends: its first declared route's
        host name (so a framework's allowed-hosts list passes), None where it has none."""
        return next((r.host for r in self.routes if r.process == process), None)

    def in_slot(self, slot_name: str) -> App:
        """The app as it runs in one slot: replicas, env and routes overridden by the slot."""
        slot = self.slots.get(slot_name)
        processes = {
            name: replace(p, replicas=slot.replicas.get(name, p.replicas))
            for name, p in self.processes.items()
        }
        return replace(
            self,
            processes=processes,
            env={**self.env, **slot.env},
            routes=slot.routes if slot.routes is not None else self.routes,
        )

    def snapshot(self, slot: Slot | None = None) -> dict[str, Any]:
        """The declarations in the spec's own format, so a release record can be parsed back
        into the App it ran (restarts re-render from it). Secrets appear as references."""
        app: dict[str, Any] = {"name": self.name}
        if self.image:
            app["image"] = self.image
        if self.image_type:
            app["image_type"] = self.image_type
        if self.release_command:
            app["release_command"] = list(self.release_command)
        if self.release_timeout is not None:
            app["release_timeout"] = self.release_timeout
        if self.build_timeout is not None:
            app["build_timeout"] = self.build_timeout
        if not self.build.enabled:
            app["build"] = False
        elif self.build.command:
            app["build"] = list(self.build.command)
        out: dict[str, Any] = {
            "app": app,
            "processes": {n: _process_json(p) for n, p in self.processes.items()},
            "env": dict(self.env),
            "secrets": {n: r.to_json() for n, r in self.secrets.items()},
            "files": {f.path: f.content for f in self.files},
            "routes": [_drop_none({**_asdict(r), "tls": route_json(r.tls)}) for r in self.routes],
        }
        from shipway.spec.build import snapshot_of

        if build := snapshot_of(self.build):
            out["build"] = build
        if self.volumes:  # absent otherwise: the snapshots of apps without volumes unchanged
            out["volumes"] = {n: v.to_json() for n, v in self.volumes.items()}
        if self.accessories:  # likewise
            out["accessories"] = {n: a.to_json() for n, a in self.accessories.items()}
        if slot is not None:
            out["slots"] = {slot.name: _slot_json(slot)}
        return out

    def config_hash(self, secrets: Mapping[str, Secret]) -> str:
        """Changes whenever env, files, or a secret's value change (values enter only hashed)."""
        doc = {
            "env": dict(sorted(self.env.items())),
            "files": sorted((f.path, f.content) for f in self.files),
            "secrets": sorted((n, s.digest()) for n, s in secrets.items()),
        }
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


def _asdict(obj: object) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__dataclass_fields__}  # type: ignore[attr-defined]


def _drop_none(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


def _process_json(p: Process) -> dict[str, Any]:
    out: dict[str, Any] = {"replicas": p.replicas}
    if p.command:
        out["command"] = list(p.command)
    if p.port is not None:
        out["port"] = p.port
    if p.healthcheck is not None:
        health = _asdict(p.healthcheck)
        health["path"] = health["path"] if health["path"] is not None else False
        out["healthcheck"] = health
    r = p.resources
    requests = _drop_none({"cpu": r.cpu_request, "memory": r.memory_request})
    limits = _drop_none({"cpu": r.cpu_limit, "memory": r.memory_limit})
    if requests or limits:
        out["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return out


def _slot_json(slot: Slot) -> dict[str, Any]:
    """The slot's own settings; overrides are already applied to the snapshot's app."""
    out: dict[str, Any] = {
        "backend": slot.backend,
        "role": slot.role,
        "guarded": slot.guarded,
        "strategy": slot.strategy,
        "sleep_after": slot.sleep_after,
        "history_limit": slot.history_limit,
    }
    if slot.canary is not None:
        out["canary"] = slot.canary.to_json()
    if slot.backend == "kubernetes":
        out.update(
            _drop_none(
                {
                    "context": slot.context,
                    "namespace": slot.namespace,
                    "drain_timeout": slot.drain_timeout,
                }
            )
        )
        if slot.source is not None:
            out["source"] = slot.source.to_json()
    elif slot.backend == "docker":
        out["hosts"] = [
            h.url
            if h.processes is None and h.address is None
            else _drop_none(
                {
                    "url": h.url,
                    "processes": list(h.processes) if h.processes is not None else None,
                    "address": h.address,
                }
            )
            for h in slot.hosts
        ]
        out.update(
            _drop_none(
                {
                    "known_hosts": slot.known_hosts,
                    "proxy_image": slot.proxy_image,
                    "proxy_port": slot.proxy_port,
                    "drain_timeout": slot.drain_timeout,
                    "batch": slot.batch,
                    "acme": slot.acme.to_json() if slot.acme else None,
                    "proxy_tls_port": slot.proxy_tls_port,
                    "hsts": slot.hsts or None,
                }
            )
        )
    else:
        out.update(_drop_none({"state_dir": slot.state_dir, "router_port": slot.router_port}))
    return out
