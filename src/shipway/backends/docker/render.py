"""What a release means on a slot's Docker hosts: the units, per host. PURE.

Per host, for the processes that host runs (its roles):

``files/<content>@host``    phase 0  a content-addressed volume holding the app's config
                                     files; containers bind-mount each file read-only
``proxy@host``              phase 0  the host's shared reverse proxy (Caddy) publishing
                                     ``proxy_port``, used by every app and slot serving
                                     on that port (its body names nothing of this slot's,
                                     so every slot's is the same); waits until it accepts
                                     connections
``container/<p>.<i>/<deployment id>@host``
                            phase 1  one container per replica, named by deployment id so a
                                     new release's containers start BESIDE the old ones;
                                     waits (the health gate); never switches traffic
``route/<p>@host``          phase 2  this slot's route for process ``p`` in the shared
                                     proxy, pointing at this release's containers:
                                     applying it is the switch
``volume/<name>@host``      phase 0  a named volume of the app's data, on each host that
                                     runs a process mounting it (Kamal's named volumes);
                                     it belongs to the slot: no plan removes it

A deploy gives every process a fresh deployment id, so every container is new and the old
ones are removed (drained first) after the switch; a targeted restart renews only the
target's containers and route, every other unit is the deployed release's own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shipway.backends.docker import caddy, labels
from shipway.backends.docker.https import https_of, issuer_of, tls_of, tls_proxy_body
from shipway.backends.docker.machines import HostAddress, addresses
from shipway.backends.expand import expand_words
from shipway.backends.imagemeta import start_command
from shipway.release.artifact import PREREQUISITE, ROUTING, WORKLOAD, Artifact, Unit, digest_of
from shipway.release.model import Release
from shipway.spec.model import App, Process, Resources, Slot
from shipway.spec.secrets import names_in, placeholder
from shipway.spec.tls import DEFAULT_TLS_PORT
from shipway.spec.volumes import Volume, mounted_by

DEFAULT_PROXY_IMAGE = "caddy:2"
DEFAULT_PROXY_PORT = 80
DEFAULT_DRAIN = 5.0
#: the port the proxy listens on inside its container (published as ``proxy_port``)
PROXY_LISTEN = 80
#: seconds ``docker stop`` waits after SIGTERM before SIGKILL
STOP_TIMEOUT = 10
#: how long the proxy keeps retrying a request whose upstream refuses or is gone (a
#: container replaced in place, a replica restarting) before answering 502
UPSTREAM_TRY = 5.0
#: without a declared healthcheck: a process with a port is ready when the port accepts
#: connections; one without must stay up this long without restarting.
TCP_CHECK: dict[str, Any] = {
    "mode": "tcp",
    "interval": 0.2,
    "timeout": 1.0,
    "attempts": 150,
    "initial_delay": 0.0,
}
MIN_UPTIME = 1.0


@dataclass(frozen=True)
class Settings:
    proxy_image: str
    proxy_port: int
    drain: float
    tls_port: int = DEFAULT_TLS_PORT

    @classmethod
    def of(cls, slot: Slot) -> Settings:
        return cls(
            proxy_image=slot.proxy_image or DEFAULT_PROXY_IMAGE,
            proxy_port=slot.proxy_port or DEFAULT_PROXY_PORT,
            drain=DEFAULT_DRAIN if slot.drain_timeout is None else slot.drain_timeout,
            tls_port=slot.proxy_tls_port or DEFAULT_TLS_PORT,
        )


# -- keys ---------------------------------------------------------------------------------


def container_key(process: str, replica: int, deployment_id: str, host: str) -> str:
    return f"container/{process}.{replica}/{deployment_id}@{host}"


def proxy_key(host: str) -> str:
    return f"proxy@{host}"


def route_key(process: str, host: str) -> str:
    return f"route/{process}@{host}"


def files_key(content: str, host: str) -> str:
    return f"files/{content[:12]}@{host}"


def volume_key(name: str, host: str) -> str:
    return f"volume/{name}@{host}"


# -- pieces -------------------------------------------------------------------------------


def health_of(process: Process) -> dict[str, Any]:
    hc = process.healthcheck
    if hc is None:
        if process.port is not None:
            return dict(TCP_CHECK)
        return {"mode": "uptime", "initial_delay": MIN_UPTIME}
    if hc.path is None or process.port is None:
        return {"mode": "uptime", "initial_delay": max(hc.initial_delay, MIN_UPTIME)}
    return {
        "mode": "http",
        "path": hc.path,
        "interval": hc.interval,
        "timeout": hc.timeout,
        "attempts": hc.attempts,
        "initial_delay": hc.initial_delay,
    }


def with_host(health: dict[str, Any], host: str | None) -> dict[str, Any]:
    """An HTTP check sends the process's route host name as ``Host`` (absent: the
    container's address and port, for a process no route names)."""
    if host is None or health.get("mode") != "http":
        return health
    return {**health, "host": host}


_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_FACTORS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def memory_bytes(quantity: str | None) -> int | None:
    if quantity is None:
        return None
    m = _QUANTITY.match(quantity)
    if m is None or m.group(2) == "m":
        return None
    return int(float(m.group(1)) * _FACTORS[m.group(2)])


def cpus(quantity: str | None) -> float | None:
    if quantity is None:
        return None
    m = _QUANTITY.match(quantity)
    if m is None:
        return None
    value = float(m.group(1))
    return value / 1000 if m.group(2) == "m" else value


def resources_of(r: Resources) -> dict[str, int | None]:
    """Kubernetes-style quantities as Docker host config: limits are hard (memory, NanoCpus),
    requests become a memory reservation and CPU shares (1024 per CPU)."""
    cpu_limit, cpu_request = cpus(r.cpu_limit), cpus(r.cpu_request)
    return {
        "memory": memory_bytes(r.memory_limit),
        "memory_reservation": memory_bytes(r.memory_request),
        "nano_cpus": int(cpu_limit * 1e9) if cpu_limit else None,
        "cpu_shares": max(2, int(cpu_request * 1024)) if cpu_request else None,
    }


def routed_processes(app: App) -> dict[str, tuple[str, ...]]:
    """Process → the host names the proxy sends to it. With no routes declared, every
    request goes to the first process that has a port (an empty tuple: catch-all)."""
    if app.routes:
        out: dict[str, list[str]] = {}
        for route in app.routes:
            out.setdefault(route.process, []).append(route.host)
        return {p: tuple(sorted(set(h))) for p, h in out.items()}
    for name, process in app.processes.items():
        if process.port is not None:
            return {name: ()}
    return {}


def files_of(app: App) -> list[dict[str, Any]]:
    return [
        {
            "path": f.path,
            "content": f.content,
            "mode": "0600" if f.secret_bearing or names_in(f.content) else "0644",
        }
        for f in sorted(app.files, key=lambda f: f.path)
    ]


# -- the artifact -------------------------------------------------------------------------


def render(app: App, slot: Slot, release: Release) -> Artifact:
    settings = Settings.of(slot)
    hosts = addresses(slot.hosts)
    routed = routed_processes(app)
    image = release.image_ref() or app.image or ""
    network = labels.network(app.name, slot.name)
    files = files_of(app)
    content = digest_of({"files": files, "config": release.config_hash}) if files else ""
    volume = labels.files_volume(app.name, slot.name, content) if files else None
    workdir = (release.image_meta.working_dir if release.image_meta else None) or "/"
    env = dict(sorted({**app.env, **{n: placeholder(n) for n in app.secrets}}.items()))

    https = https_of(app, slot, release, issuer_of(app, slot))
    units: list[Unit] = []
    for host in hosts:
        processes = [p for p in app.processes.values() if host.runs(p.name)]
        if not processes:
            continue
        if volume is not None:
            units.append(
                Unit(
                    key=files_key(content, host.name),
                    kind="files",
                    phase=PREREQUISITE,
                    host=host.name,
                    body={"kind": "files", "volume": volume, "content": content, "files": files},
                )
            )
        for data in volumes_here(app, processes):
            units.append(
                Unit(
                    key=volume_key(data.name, host.name),
                    kind="volume",
                    phase=PREREQUISITE,
                    host=host.name,
                    body={
                        "kind": "volume",
                        "name": data.name,
                        "volume": labels.data_volume(app.name, slot.name, data.name),
                    },
                )
            )
        routes_here = [p for p in processes if p.name in routed and p.replicas > 0]
        if routes_here:
            secure = any(https.get(p.name) for p in routes_here)
            units.append(_proxy_unit(host, settings, secure))
        for process in processes:
            names = []
            for replica in range(1, process.replicas + 1):
                unit = _container_unit(
                    app, slot, release, host, process, replica, image, env, network,
                    volume, files, workdir,
                )  # fmt: skip
                names.append(unit.body["name"])
                units.append(unit)
            if process in routes_here:
                assert process.port is not None
                units.append(
                    Unit(
                        key=route_key(process.name, host.name),
                        kind="route",
                        phase=ROUTING,
                        process=process.name,
                        host=host.name,
                        switches=True,
                        body={
                            "kind": "route",
                            "proxy": labels.shared_proxy(settings.proxy_port),
                            "process": process.name,
                            "drain": settings.drain,
                            "hosts": list(routed[process.name]),
                            "upstreams": [f"{n}:{process.port}" for n in names],
                            **tls_of(https.get(process.name), host),
                        },
                    )
                )
    return Artifact(tuple(units))


def volumes_here(app: App, processes: list[Process]) -> list[Volume]:
    """The volumes some process of this host mounts."""
    return [
        v for _, v in sorted(app.volumes.items()) if any(v.mounted_by(p.name) for p in processes)
    ]


def _proxy_unit(host: HostAddress, settings: Settings, secure: bool) -> Unit:
    body = shared_proxy_body(settings.proxy_image, settings.proxy_port)
    if secure:
        body |= tls_proxy_body(settings.proxy_port, settings.tls_port)
    return Unit(
        key=proxy_key(host.name),
        kind="proxy",
        phase=PREREQUISITE,
        host=host.name,
        waits=True,
        body=body,
    )


def shared_proxy_body(image: str, port: int) -> dict[str, Any]:
    """The host's shared proxy on ``port``: nothing in it is a slot's own (the drain window
    is each route's), so every slot serving on that port renders the same body (one that
    serves HTTPS too: :func:`tls_proxy_body`)."""
    return {
        "kind": "proxy",
        "shared": True,
        "name": labels.shared_proxy(port),
        "image": image,
        "port": port,
        "listen": PROXY_LISTEN,
        "network": labels.PROXY_NETWORK,
        "volume": labels.shared_proxy(port),
        "config_dir": caddy.CONFIG_DIR,
        "upstream_try": UPSTREAM_TRY,
        "restart": "unless-stopped",
        "stop_timeout": STOP_TIMEOUT,
    }


def _container_unit(
    app: App,
    slot: Slot,
    release: Release,
    host: HostAddress,
    process: Process,
    replica: int,
    image: str,
    env: Mapping[str, str],
    network: str,
    volume: str | None,
    files: list[dict[str, Any]],
    workdir: str,
) -> Unit:
    deployment_id = release.deployment_ids.get(process.name, "0")
    start = start_command(release.image_meta, process.name, process.command)
    process_env = dict(env)
    if process.port is not None:
        process_env["PORT"] = str(process.port)
    args = start.args
    if args is not None and process.command:  # the declared command, as a Procfile runs it
        args = expand_words(args, process_env, keep=app.secrets)
    mounts = [{"file": f["path"], "target": workdir.rstrip("/") + "/" + f["path"]} for f in files]
    data = [
        {"volume": labels.data_volume(app.name, slot.name, v.name), "target": v.target(workdir)}
        for v in mounted_by(app.volumes, process.name)
    ]
    return Unit(
        key=container_key(process.name, replica, deployment_id, host.name),
        kind="container",
        phase=WORKLOAD,
        process=process.name,
        host=host.name,
        waits=True,
        body={
            "kind": "app",
            "name": labels.container(app.name, slot.name, process.name, replica, deployment_id),
            "image": image,
            "entrypoint": list(start.entrypoint) if start.entrypoint is not None else None,
            "args": list(args) if args is not None else None,
            "env": dict(sorted(process_env.items())),
            "network": network,
            "aliases": [process.name],
            "volume": volume,
            "mounts": mounts,
            **({"data": data} if data else {}),  # absent: bodies without volumes unchanged
            "port": process.port,
            "health": with_host(health_of(process), app.probe_host(process.name)),
            "resources": resources_of(process.resources),
            "restart": "unless-stopped",
            "stop_timeout": STOP_TIMEOUT,
            "labels": {
                labels.PROCESS: process.name,
                labels.RELEASE: str(release.revision),
                labels.DEPLOYMENT: deployment_id,
                labels.REPLICA: str(replica),
            },
        },
    )
