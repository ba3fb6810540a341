"""Creating a container exactly as a unit says, through the Engine API's create call (the
SDK's high-level ``create`` cannot set everything a unit needs, e.g. the stop timeout);
what it needs first on its host (its network, its image, its files' mounts); removing one.

Callers run these inside :func:`~shipway.backends.docker.edge.edge`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import docker
import docker.errors
import docker.types
from docker.models.containers import Container
from docker.utils import parse_repository_tag

from shipway.backends.docker import labels
from shipway.errors import BackendError


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    entrypoint: Sequence[str] | None = None  # None: the image's
    command: Sequence[str] | None = None  # None: the image's
    network: str | None = None
    aliases: Sequence[str] = ()
    mounts: Sequence[docker.types.Mount] = ()
    #: container port -> host port, or (host address, port): published there only
    ports: Mapping[int, int | tuple[str, int]] = field(default_factory=dict)
    restart: str = "no"
    stop_timeout: int | None = None
    memory: int | None = None
    memory_reservation: int | None = None
    nano_cpus: int | None = None
    cpu_shares: int | None = None
    sysctls: Mapping[str, str] = field(default_factory=dict)
    #: the container's log options (``{"type": driver, "config": {...}}``); None: the engine's
    log: Mapping[str, Any] | None = None
    stdin_open: bool = False  # a one-off command's standard input (``docker run -i``)
    tty: bool = False  # a one-off command's terminal (``docker run -t``)


def create(client: docker.DockerClient, spec: ContainerSpec) -> Container:
    api = client.api
    host_kwargs: dict[str, Any] = {
        "restart_policy": {"Name": spec.restart} if spec.restart != "no" else None,
        "mounts": list(spec.mounts) or None,
        "port_bindings": {f"{c}/tcp": h for c, h in spec.ports.items()} or None,
        "network_mode": spec.network,
        "sysctls": dict(spec.sysctls) or None,
        "log_config": docker.types.LogConfig(**spec.log) if spec.log else None,
    }
    for key in ("memory", "memory_reservation", "nano_cpus", "cpu_shares"):
        value = getattr(spec, key)
        if value:
            host_kwargs["mem_limit" if key == "memory" else key.replace("memory_", "mem_")] = value
    host_config = api.create_host_config(**{k: v for k, v in host_kwargs.items() if v})
    networking = (
        api.create_networking_config(
            # the stubs say one EndpointConfig; the API takes {network: EndpointConfig}
            cast(
                Any, {spec.network: api.create_endpoint_config(aliases=list(spec.aliases) or None)}
            )
        )
        if spec.network
        else None
    )
    created = api.create_container(
        spec.image,
        command=list(spec.command) if spec.command is not None else None,
        entrypoint=list(spec.entrypoint) if spec.entrypoint is not None else None,
        name=spec.name,
        environment=[f"{k}={v}" for k, v in spec.env.items()],
        labels=dict(spec.labels),
        ports=[int(p) for p in spec.ports] or None,
        host_config=host_config,
        networking_config=networking,
        stop_timeout=spec.stop_timeout,
        stdin_open=spec.stdin_open,
        tty=spec.tty,
    )
    # what callers use of it (its id, name, and the calls on it) needs no inspection
    return client.containers.prepare_model({"Id": created["Id"], "Name": spec.name})


def ensure_network(client: docker.DockerClient, app: str, slot: str, name: str) -> None:
    """The slot's network on this host (made, labelled as the slot's, unless it is there)."""
    if client.networks.list(names=[name]):
        return
    try:
        client.networks.create(
            name,
            driver="bridge",
            labels=labels.base(app, slot, "network"),
            check_duplicate=True,
        )
    except docker.errors.APIError as exc:
        if exc.status_code != 409:
            raise


def ensure_image(client: docker.DockerClient, ref: str) -> dict[str, Any]:
    """The image on this host, pulled unless it is there (before anything old goes: an
    image that cannot be had leaves what runs running); its inspection."""
    try:
        return dict(client.images.get(ref).attrs)
    except docker.errors.ImageNotFound:
        pass
    repo, tag = parse_repository_tag(ref)
    for chunk in client.api.pull(repo, tag=tag or "latest", stream=True, decode=True):
        if isinstance(chunk, dict) and "error" in chunk:
            raise BackendError(f"cannot pull image {ref}: {chunk['error']}")
    return dict(client.images.get(ref).attrs)  # ImageNotFound when the pull made nothing


def file_mounts(client: docker.DockerClient, body: Mapping[str, Any]) -> list[docker.types.Mount]:
    """Each config file of the unit's files volume, bind-mounted read-only where the
    process expects it (the volume's own directory on the host is the source)."""
    if not body.get("volume") or not body.get("mounts"):
        return []
    source = client.volumes.get(str(body["volume"])).attrs["Mountpoint"]
    return [
        docker.types.Mount(
            target=str(m["target"]),
            source=f"{source}/{m['file']}",
            type="bind",
            read_only=True,
        )
        for m in body["mounts"]
    ]


def data_mounts(body: Mapping[str, Any]) -> list[docker.types.Mount]:
    """The app's data volumes, each mounted read-write where the process expects it."""
    return [
        docker.types.Mount(target=str(m["target"]), source=str(m["volume"]), type="volume")
        for m in body.get("data") or []
    ]


#: a container's states once the engine began removing it and did not finish (another call
#: held its files: a read of them at that moment, say): it runs nothing, its files cannot be
#: read (each read answers 500), and only a removal again ends it
HALF_REMOVED = frozenset({"removing", "dead"})


def half_removed(c: Container) -> bool:
    """Whether the engine left ``c`` half removed (:data:`HALF_REMOVED`); listed or
    inspected, as it was then."""
    return c.status in HALF_REMOVED


def unreadable(client: docker.DockerClient, container: str) -> bool:
    """Whether the container with this name or id is gone or half removed: a read of its
    files that failed has nothing to read."""
    try:
        return half_removed(client.containers.get(container))
    except docker.errors.NotFound:
        return True


def remove(c: Container, timeout: int) -> None:
    """Stop it (giving it ``timeout`` seconds) and remove it; one already gone is fine, and
    so is one whose removal the engine already runs (``409 removal ... is already in
    progress``: a restart policy's or another call's): it is waited on until gone."""
    with contextlib.suppress(docker.errors.NotFound):
        if c.status in ("running", "restarting", "paused"):
            c.stop(timeout=timeout)
    try:
        c.remove(force=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        if exc.status_code != 409 or "already in progress" not in str(exc):
            raise
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            c.wait(condition="removed", timeout=max(timeout, 10))
