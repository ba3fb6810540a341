"""The slot's accessories on its Docker hosts: each one a container on one host (its
``host``; default: the slot's first), its data in a named volume there.

On that host::

    shipway-<app>-<slot>-acc-<name>        its container (kind ``accessory``): the official
                                           image of its kind and major version (or the same
                                           name under $SHIPWAY_ACCESSORY_MIRROR), restarted by
                                           the engine unless stopped, its declaration in its
                                           labels (digest and JSON: what was started)
    shipway-<app>-<slot>-acc-<name>-data   its data (kind ``accessory-data``); the volume's
                                           labels hold its credentials: password, port,
                                           database, made once with it

Where the app reaches it: the host's address (the ``address`` of the host's entry in the
slot; an ssh:// host's own address, the one shipway reaches it at), its port published on
that address only — never on every interface (Kamal published accessories on 0.0.0.0 until
2026: basecamp/kamal#1790) — so every host of the slot reaches it as the link says. A slot
whose app runs on the accessory's host alone, a unix:// host with no address, publishes
nothing: the app reaches it on the slot's network by its container's name.

What must never happen: an app's deploy, rollback, restart or ``stop`` touching it (their
steps find the containers they act on by kinds this is not, and only a
:class:`~shipway.plan.model.StartAccessory` step comes here); its volume deleted by anything
but ``destroy --volumes``; a second password made for it (a volume's labels never change,
and of two creators of one volume the engine keeps the first one's); it moved to another
host, away from its data (refused when planned).
"""

from __future__ import annotations

import json
import random
import secrets as _random
import time
from collections.abc import Mapping
from typing import Any

import docker
import docker.errors
import docker.types
from docker.models.containers import Container
from docker.models.volumes import Volume

from shipway.backends.accessories import PG_USER as _PG_USER
from shipway.backends.accessories import (
    SERVER_PORTS,
    AccessoryStatus,
    Credentials,
    link_name,
    server_image,
)
from shipway.backends.docker import container_logs, labels
from shipway.backends.docker.connection import HostConnection, Stream
from shipway.backends.docker.containers import (
    ContainerSpec,
    create,
    ensure_image,
    ensure_network,
    remove,
)
from shipway.backends.docker.edge import edge
from shipway.backends.docker.machines import HostAddress
from shipway.backends.docker.state import DockerState
from shipway.backends.docker.volumes import volume_sizes
from shipway.backends.protocol import Failure, Leftover, Reason, Reporter
from shipway.backends.volume_status import human_bytes
from shipway.backends.wire import answers
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.plan.model import StartAccessory
from shipway.spec.accessories import Accessory, from_json
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Secret, redact

#: how long a started accessory may take to answer (a first Postgres start runs initdb)
START_LIMIT = 180.0
LOOK = 0.25
PROBE_TIMEOUT = 2.0
#: seconds a server gets to stop (Postgres' fast shutdown, Redis' last write)
STOP_TIMEOUT = 30
#: where a published accessory's port is chosen, once: below the kernel's ephemeral range
#: (32768-), so no outgoing connection of the host holds it
PORTS = range(32000, 32768)
#: where each kind keeps its data in the official images
DATA_DIRS = {"postgres": "/var/lib/postgresql/data", "redis": "/data"}


def _credentials(volume: Volume) -> Credentials | None:
    tags: Mapping[str, str] = volume.attrs.get("Labels") or {}
    if labels.ACCESSORY_PASSWORD not in tags:
        return None
    return Credentials(
        tags[labels.ACCESSORY_PASSWORD],
        int(tags[labels.ACCESSORY_PORT]),
        tags[labels.ACCESSORY_DATABASE],
    )


def pg_data(c: Container) -> str:
    """Where a Postgres accessory's container keeps its cluster: the volume's root, or
    after an upgrade to major N its directory ``pgN`` (its PGDATA), kept when it is replaced."""
    env = (c.attrs.get("Config") or {}).get("Env") or []
    found = [e.split("=", 1)[1] for e in env if e.startswith("PGDATA=")]
    return found[-1] if found else DATA_DIRS["postgres"]


def data_dir(c: Container, kind: str) -> str:
    """Where an accessory's container keeps its data: the volume's root, or after an
    upgrade to major N its directory — Postgres' ``pgN`` (:func:`pg_data`), Redis'
    ``redisN`` (its ``--dir``)."""
    if kind == "postgres":
        return pg_data(c)
    words = list((c.attrs.get("Config") or {}).get("Cmd") or [])
    found = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--dir"]
    return found[-1] if found else DATA_DIRS[kind]


def _published_ports(client: docker.DockerClient) -> set[int]:
    """Every port a container of the host publishes (any app's, any tool's)."""
    used: set[int] = set()
    for c in client.api.containers(all=True):
        for p in c.get("Ports") or []:
            if p.get("PublicPort"):
                used.add(int(p["PublicPort"]))
    return used


class DockerAccessories(DockerState):
    """The protocol's Accessories (:mod:`shipway.backends.accessories`)."""

    # -- where -------------------------------------------------------------------------

    def _accessory_host(self, accessory: Accessory) -> HostAddress:
        """The host it runs on: the one its ``host`` names (by URL or short name), else the
        slot's first. InputError when it names none of the slot's."""
        if accessory.host is None:
            return self.host_addresses[0]
        for h in self.host_addresses:
            if accessory.host in (h.url, h.name):
                return h
        raise InputError(
            f"{self.app.spec_file.name}: accessories.{accessory.name}.host: {accessory.host!r} "
            f"is not one of slot {self.slot.name}'s hosts "
            f"({', '.join(h.url for h in self.host_addresses)}) (hint: name one of them, or "
            "leave host out: the slot's first host)"
        )

    def _declared_address(self, host: HostAddress) -> str | None:
        return next((h.address for h in self.slot.hosts if h.url == host.url), None)

    def _bind_address(self, host: HostAddress) -> str | None:
        """Where its port is published: the host's declared address, else the address
        shipway reaches an ssh:// host at; None (a unix:// host without one): nowhere."""
        declared = self._declared_address(host)
        if declared is not None:
            return declared
        with edge(f"host {host.name}: its address"):
            return self._conn(host.name).peer()

    def _reached_at(self, accessory: Accessory, host: HostAddress) -> str:
        """The host name in the app's link: the published address, or the container's name
        on the slot's network."""
        bind = self._bind_address(host)
        return bind or labels.accessory(self.app.name, self.slot.name, accessory.name)

    # -- reads -------------------------------------------------------------------------

    def accessory_problems(self, app: App, slot: Slot) -> list[str]:
        if not app.accessories:  # nothing to ask the hosts
            return []
        out = []
        spec = app.spec_file.name
        for accessory in app.accessories.values():
            try:
                host = self._accessory_host(accessory)
            except InputError as exc:
                out.append(str(exc))
                continue
            if accessory.kind == "custom":
                out.append(f"{spec}: accessories.{accessory.name}: docker runs postgres and redis")
                continue
            others = [
                h.name
                for h in self.host_addresses
                if h.name != host.name and any(h.runs(p) for p in app.processes)
            ]
            if not host.over_ssh and self._declared_address(host) is None and others:
                out.append(
                    f"{spec}: slots.{slot.name}.hosts: accessory {accessory.name} runs on "
                    f"{host.name}, which has no address that {', '.join(others)} reach it at, "
                    "and shipway publishes it on no address the spec does not name (hint: "
                    f'{{ url = "{host.url}", address = "10.0.0.5" }}, the address of {host.name} '
                    "on the network the slot's hosts share)"
                )
        out += self._moved(app)
        return out

    def _moved(self, app: App) -> list[str]:
        """An accessory declared on another host than the one its container and data are
        on: moving it would leave its data behind."""
        found = {s.name: s for s in self.accessories(app.slots.target(self.slot.name))}
        out = []
        for name, accessory in app.accessories.items():
            now = found.get(name)
            host = self._accessory_host(accessory)
            if now is not None and now.host is not None and now.host != host.name:
                out.append(
                    f"{app.spec_file.name}: accessories.{name}.host: accessory {name} runs on "
                    f"{now.host} with its data, and the spec puts it on {host.name}: shipway "
                    f'does not move an accessory\'s data (hint: keep host = "{now.host}"; to '
                    "move it, dump its data, destroy the slot with --volumes, deploy, and "
                    "restore the dump)"
                )
        return out

    def accessories(self, target: Target) -> list[AccessoryStatus]:
        self._serves(target)
        found = self._each_host(self._accessories_on)
        return [a for h in self.host_addresses for a in found[h.name]]

    def _accessories_on(self, conn: HostConnection) -> list[AccessoryStatus]:
        with edge(f"host {conn.name}: list accessories"):
            client = conn.client()
            listed = self._labelled(client, labels.ACCESSORY, sparse=True)
            if not listed:  # a slot without accessories costs one list call
                return []
            containers = [client.containers.get(str(c.id)) for c in listed]
            volumes = self._accessory_volumes(client)
            used = volume_sizes(client)
            return [self._accessory_status(conn, c, volumes, used) for c in containers]

    def _accessory_volumes(self, client: docker.DockerClient) -> dict[str, Volume]:
        found = client.volumes.list(
            filters=labels.slot_filter(self.app.name, self.slot.name, labels.ACCESSORY_DATA)
        )
        return {str(v.name): v for v in found}

    def _accessory_status(
        self,
        conn: HostConnection,
        c: Container,
        volumes: Mapping[str, Volume],
        used: Mapping[str, int],
    ) -> AccessoryStatus:
        tags = c.labels
        name = str(tags.get(labels.ACCESSORY_NAME))
        declared: dict[str, Any] = json.loads(tags.get(labels.UNIT) or "{}")
        kind = str(declared.get("kind", "custom"))
        volume_name = labels.accessory_volume(self.app.name, self.slot.name, name)
        volume = volumes.get(volume_name)
        creds = _credentials(volume) if volume is not None else None
        healthy = (
            c.status == "running" and creds is not None and self._answers(conn, c, kind, creds)
        )
        state = (
            "running"
            if healthy
            else "starting"
            if c.status in ("running", "restarting")
            else "down"
        )
        bind = self._bound_address(c)
        address = (
            f"{bind}:{creds.port}"
            if bind and creds
            else f"{c.name}:{SERVER_PORTS.get(kind)} (the slot's network)"
        )
        return AccessoryStatus(
            name=name,
            kind=kind,
            version=declared.get("version"),
            state=state,
            healthy=healthy,
            digest=tags.get(labels.DIGEST),
            declared=declared,
            address=address,
            data_path=f"volume {volume_name} on {conn.name}",
            data_bytes=used.get(volume_name),
            host=conn.name,
        )

    @staticmethod
    def _bound_address(c: Container) -> str | None:
        bindings = (c.attrs.get("HostConfig") or {}).get("PortBindings") or {}
        for bound in bindings.values():
            for b in bound or []:
                if b.get("HostIp"):
                    return str(b["HostIp"])
        return None

    def _answers(self, conn: HostConnection, c: Container, kind: str, creds: Credentials) -> bool:
        """Whether its server takes the app's login, asked on the slot's network from
        the host (over SSH for a remote one): the published port may not be reachable from
        where shipway runs."""
        try:
            stream = self._dial(conn, c, kind, PROBE_TIMEOUT)
        except OSError:
            return False
        try:
            return answers(kind, stream, creds)
        except OSError:
            return False
        finally:
            stream.close()

    def _dial(self, conn: HostConnection, c: Container, kind: str, timeout: float) -> Stream:
        """A connection to its server's port on the slot's network, from the host; reads
        bounded by ``timeout``. OSError when it has no address there or nothing answers."""
        network = labels.network(self.app.name, self.slot.name)
        networks = (c.attrs.get("NetworkSettings") or {}).get("Networks") or {}
        ip = (networks.get(network) or {}).get("IPAddress")
        port = SERVER_PORTS.get(kind)
        if not ip or port is None:
            raise OSError(f"container {c.name} has no address on network {network}")
        stream = conn.dial(str(ip), port, PROBE_TIMEOUT)
        stream.settimeout(timeout)
        return stream

    def accessory_links(
        self, target: Target, declared: Mapping[str, Accessory], clearance: Clearance | None
    ) -> dict[str, Secret]:
        if clearance is not None:
            self._guard(clearance, target)
        else:
            self._serves(target)
        out: dict[str, Secret] = {}
        for name, accessory in declared.items():
            if accessory.kind == "custom":
                continue
            host = self._accessory_host(accessory)
            with edge(f"host {host.name}: accessory {name}'s credentials"):
                client = self._conn(host.name).client()
                creds = self._made_credentials(client, host, accessory, clearance is not None)
            if creds is not None:
                out[name] = Secret(creds.link(accessory.kind, self._reached_at(accessory, host)))
                out[link_name(name)] = Secret(creds.password)
        return out

    # -- mutations ---------------------------------------------------------------------

    def _made_credentials(
        self, client: docker.DockerClient, host: HostAddress, accessory: Accessory, make: bool
    ) -> Credentials | None:
        """Its credentials, from its data volume's labels; with ``make``, the volume is made
        with new ones when it is missing (the engine keeps the first creator's labels when
        two make it at once, and both read those back)."""
        name = labels.accessory_volume(self.app.name, self.slot.name, accessory.name)
        try:
            volume = client.volumes.get(name)
        except docker.errors.NotFound:
            if not make:
                return None
            published = self._bind_address(host) is not None
            if published:
                free = sorted(set(PORTS) - _published_ports(client))
                if not free:
                    raise BackendError(
                        f"host {host.name}: no free port in {PORTS.start}-{PORTS.stop - 1} "
                        f"to publish accessory {accessory.name} on"
                    ) from None
                port = random.choice(free)
            else:
                port = SERVER_PORTS[accessory.kind]
            tags = {
                **labels.base(self.app.name, self.slot.name, labels.ACCESSORY_DATA),
                labels.ACCESSORY_NAME: accessory.name,
                labels.ACCESSORY_PASSWORD: _random.token_urlsafe(24),
                labels.ACCESSORY_PORT: str(port),
                labels.ACCESSORY_DATABASE: self.app.name,
            }
            client.volumes.create(name, driver="local", labels=tags)
            volume = client.volumes.get(name)
            self._note(host.name, f"made accessory {accessory.name}'s volume and credentials")
        creds = _credentials(volume)
        if creds is None:
            raise BackendError(
                f"host {host.name}: volume {name} exists and holds no credentials shipway "
                f"made (hint: it was not made by shipway: rename accessory {accessory.name}, "
                "or remove the volume if its data is not wanted)"
            )
        return creds

    def start_accessory(
        self,
        clearance: Clearance,
        target: Target,
        step: StartAccessory,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        self._guard(clearance, target)
        accessory = from_json(step.accessory, json.loads(step.declaration))
        host = self._accessory_host(accessory)
        conn = self._conn(host.name)
        bind = self._bind_address(host)
        name = labels.accessory(self.app.name, self.slot.name, accessory.name)
        image = server_image(accessory, self.environ)
        with edge(f"host {host.name}: accessory {accessory.name}"):
            client = conn.client()
            creds = self._made_credentials(client, host, accessory, True)
            assert creds is not None
            network = labels.network(self.app.name, self.slot.name)
            ensure_network(client, self.app.name, self.slot.name, network)
            found = self._get(client, name)
            if step.action == "upgrade" and found is not None:
                # it builds on backups, which build on this module
                from shipway.backends.docker.backups import DockerBackups
                from shipway.backends.docker.upgrades import upgrade

                assert isinstance(self, DockerBackups)
                return upgrade(self, conn, found, accessory, creds, bind, deadline, reporter)
            same = found is not None and found.labels.get(labels.DIGEST) == accessory.digest()
            if found is not None and same and step.action == "start":
                if found.status != "running":
                    found.start()
                self._note(host.name, f"started accessory {accessory.name}")
            else:
                ensure_image(client, image)  # before the old one goes
                if found is not None:
                    remove(found, STOP_TIMEOUT)
                data = data_dir(found, accessory.kind) if found is not None else None
                if found is None:
                    from shipway.backends.docker.upgrades import cluster_dir

                    data = cluster_dir(self, client, image, accessory)
                spec = self._server(accessory, image, name, network, creds, bind, data)
                create(client, spec).start()
                self._note(host.name, f"{step.action}d accessory {accessory.name} ({image})")
        return self._accessory_gate(conn, accessory, name, creds, deadline, reporter)

    def _server(
        self,
        accessory: Accessory,
        image: str,
        name: str,
        network: str,
        creds: Credentials,
        bind: str | None,
        data: str | None = None,
    ) -> ContainerSpec:
        """Its container, as the official image of its kind takes it: Postgres from the
        environment its entrypoint reads (POSTGRES_USER, _PASSWORD, _DB: used when the data
        directory is empty; PGDATA ``data``, a directory of the volume after an upgrade),
        Redis from its command line (a password, the append-only file on, ``--dir``
        ``data`` after an upgrade)."""
        kind = accessory.kind
        env: dict[str, str] = {}
        command: list[str] | None = None
        if kind == "postgres":
            env = {
                "POSTGRES_USER": _PG_USER,
                "POSTGRES_PASSWORD": creds.password,
                "POSTGRES_DB": creds.database,
            }
            if data is not None and data != DATA_DIRS[kind]:
                env["PGDATA"] = data
        else:
            command = ["redis-server", "--requirepass", creds.password, "--appendonly", "yes"]
            if data is not None and data != DATA_DIRS[kind]:
                command += ["--dir", data]
        volume = labels.accessory_volume(self.app.name, self.slot.name, accessory.name)
        port = SERVER_PORTS[kind]
        return ContainerSpec(
            image=image,
            name=name,
            env=env,
            labels={
                **labels.base(self.app.name, self.slot.name, labels.ACCESSORY),
                labels.ACCESSORY_NAME: accessory.name,
                labels.DIGEST: accessory.digest(),
                labels.UNIT: json.dumps(accessory.to_json(), sort_keys=True),
            },
            command=command,
            network=network,
            aliases=(name,),
            mounts=[docker.types.Mount(target=DATA_DIRS[kind], source=volume, type="volume")],
            ports={port: (bind, creds.port)} if bind else {},
            restart="unless-stopped",
            stop_timeout=STOP_TIMEOUT,
        )

    def _accessory_gate(
        self,
        conn: HostConnection,
        accessory: Accessory,
        name: str,
        creds: Credentials,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        """Until its server answers in its own protocol, or it stopped, or time is up."""
        until = min(deadline, time.monotonic() + START_LIMIT)
        where = f"{self._reached_at(accessory, conn.address)}:{creds.port}"
        while True:
            with edge(f"host {conn.name}: accessory {accessory.name}"):
                c = conn.client().containers.get(name)
                status = str(c.status)
                if status == "running" and self._answers(conn, c, accessory.kind, creds):
                    reporter.line(f"  accessory {accessory.describe()} answers on {where}")
                    return None
                stopped = status in ("exited", "dead")
                if stopped or time.monotonic() > until:
                    masked = {link_name(accessory.name): Secret(creds.password)}
                    tail = container_logs.text(c, 12).splitlines()
                    return Failure(
                        reason=Reason.STEP_FAILED,
                        message=f"accessory {accessory.describe()} on {conn.name} "
                        + ("stopped" if stopped else "did not answer in time")
                        + f" ({status})",
                        details=tuple(redact(line, masked) for line in tail),
                    )
            time.sleep(LOOK)

    # -- destroy -----------------------------------------------------------------------

    def _accessory_leftovers(self, client: docker.DockerClient, host: str) -> list[Leftover]:
        """Its data volumes (data: deleted with --volumes only); its containers are listed
        with the slot's others."""
        found = self._accessory_volumes(client)
        used = volume_sizes(client) if found else {}
        out = []
        for name, v in sorted(found.items()):
            accessory = (v.attrs.get("Labels") or {}).get(labels.ACCESSORY_NAME, "?")
            size = f", {human_bytes(used[name])}" if name in used else ""
            out.append(
                Leftover("accessory data", f"{name} on {host} (accessory {accessory}{size})", True)
            )
        return out
