"""A host's shared proxy: one Caddy per host and port, used by every app and slot that serves
there, owned by none of them.

Each slot's routes are its own part of the proxy's ``slots.json`` (``{"app/slot": {key:
unit}}``, :mod:`.caddy`); a slot changes only its part. Two slots of different apps deploy at
once under their own locks, so a change of the proxy's routes — read the files, change this
slot's part, write them, load the config composed from every part — runs under the proxy's
own lock: a container named ``shipway-proxy-<port>-lock``, made by the Engine API's create,
which only one caller can win (the engine refuses a second container of that name). Holding
it takes a fraction of a second (a read, a write, a load); one left by a killed run is broken
once the same holder has held it for :data:`STALE` seconds of this caller's waiting.

What must never happen: one slot's change losing another's written in between (both read,
both write, the last one wins) — the lock makes each change whole.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import docker
import docker.errors
from docker.models.containers import Container

from shipway.backends.docker import labels
from shipway.backends.docker.records import holder_made
from shipway.errors import BackendError

#: how long one holder may keep the lock, seen from a waiter, before it is taken as dead
STALE = 60.0
#: the longest a change waits for the lock
WAIT = 120.0
#: how often a waiter looks again
PACE = 0.05


@contextlib.contextmanager
def locked(client: docker.DockerClient, port: int, where: str) -> Iterator[None]:
    """Hold the lock on the routes of the shared proxy on ``port`` of this host."""
    name = labels.shared_proxy_lock(port)
    token = uuid.uuid4().hex
    held = _take(client, name, port, token, where)
    try:
        yield
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(held, force=True)


def _take(client: docker.DockerClient, name: str, port: int, token: str, where: str) -> str:
    """The id of the lock container this caller made (waiting while another holds it)."""
    seen: tuple[str, float] | None = None
    deadline = time.monotonic() + WAIT
    tags = {
        labels.KIND: labels.PROXY_LOCK,
        labels.SHARED_PORT: str(port),
        labels.PROXY_HOLDER: token,
    }
    while True:
        try:
            made = holder_made(
                client,
                lambda: client.api.create_container(labels.HOLDER_IMAGE, name=name, labels=tags),
            )
            return str(made["Id"])
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise
        holder = _get(client, name)
        if holder is None:
            continue  # released meanwhile
        if holder.labels.get(labels.PROXY_HOLDER) == token:
            return str(holder.id)  # this caller's own create, repeated after a fault
        now = time.monotonic()
        if seen is None or seen[0] != holder.id:
            seen = (str(holder.id), now)
        elif now - seen[1] > STALE:
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_container(seen[0], force=True)
            continue
        if now > deadline:
            raise BackendError(
                f"the shared proxy on port {port} of {where} stayed locked by another change "
                f"for {WAIT:g}s (hint: try again; a lock left by a killed run is broken after "
                f"{STALE:g}s, or remove container {name})"
            )
        time.sleep(PACE)  # the pace of looking again at who holds it


def _get(client: docker.DockerClient, name: str) -> Container | None:
    try:
        return client.containers.get(name)
    except docker.errors.NotFound:
        return None


def ensure_network(client: docker.DockerClient, name: str = labels.PROXY_NETWORK) -> str:
    """A network the shared proxies sit on (no app's: labelled with its kind only): its id.
    Made under the host's lock of port 0: the engine's duplicate check is not atomic, two
    callers creating it at once both succeed, and a container on a name two networks have
    does not start ("network … is ambiguous"); such a second one is removed."""
    found = _named(client, name)
    if len(found) == 1:
        return found[0]
    with locked(client, 0, "this host"):
        found = _named(client, name)
        if not found:
            try:
                client.networks.create(
                    name, driver="bridge", labels={labels.KIND: "network"}, check_duplicate=True
                )
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
            found = _named(client, name)
        for extra in found[1:]:
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_network(extra)
    return found[0]


def _named(client: docker.DockerClient, name: str) -> list[str]:
    """The ids of the networks of exactly this name, the first made first (the engine's
    name filter matches parts of names: "shipway" finds every slot's network too)."""
    listed = client.api.networks(names=[name])
    return [
        str(n["Id"])
        for n in sorted(listed, key=lambda n: (n["Created"], n["Id"]))
        if n["Name"] == name
    ]


def join(client: docker.DockerClient, proxy: Container, network: str) -> None:
    """Connect the proxy to a slot's network (where its routes' containers are), unless it
    is connected already; first to :data:`.labels.GATEWAY_NETWORK`, which keeps its
    published ports where they are whatever network it joins (a proxy made before it is
    moved there once: its ports published anew, connections to them refused meanwhile)."""
    networks = (proxy.attrs.get("NetworkSettings") or {}).get("Networks") or {}
    if labels.GATEWAY_NETWORK not in networks:
        _connect(client, proxy, ensure_network(client, labels.GATEWAY_NETWORK))
    if network not in networks:
        _connect(client, proxy, network)


def _connect(client: docker.DockerClient, proxy: Container, network: str) -> None:
    try:
        client.api.connect_container_to_network(str(proxy.id), network)
    except docker.errors.APIError as exc:
        if exc.status_code != 403 and "already exists" not in str(exc.explanation or ""):
            raise


def leave(client: docker.DockerClient, proxy: Container, network: str) -> None:
    """Disconnect the proxy from a slot's network it routes nothing to any more."""
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        client.api.disconnect_container_from_network(str(proxy.id), network)
