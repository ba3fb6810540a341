"""An accessory on a Docker host moved to another major version, asked for
(``--upgrade-accessory``): the data carried over by the servers' own means, never the new
server started on the old data.

In order, in the accessory's one volume: the image of the new major is pulled first (nothing
is touched when it cannot be had); the old server, which must answer, writes its data out
at the volume's root (kept after) — Postgres: a dump by its own ``pg_dump`` (its major
checked, as a backup's), ``shipway-upgrade-<old>-to-<new>.dump``; Redis: a ``BGSAVE``, the
snapshot a backup takes, copied to ``shipway-upgrade-<old>-to-<new>.rdb`` and into the new
data directory ``redis<new>``, where a helper container of the new image loads it with the
append-only file off, turns the file on and stops, while the old server still serves (a new
server that cannot load it fails the upgrade there, the old one never stopped). Then the old
container is stopped and renamed ``<name>-pg<old>`` / ``<name>-redis<old>`` (kept, with its
data where it was); a new container of the new image is started on the volume's directory
``pg<new>`` (its PGDATA; a fresh cluster made by the image's entrypoint with the same
credentials) or ``redis<new>`` (its ``--dir``), waited on until it answers, its version
checked to be the new major; then the dump loaded into it as a restore loads one
(:meth:`~shipway.backends.docker.backups.DockerBackups._pg_load`), or (Redis) its keys
counted, none missing when the old one had some. Only then are the old container and the
old data's files deleted. When any of it fails, the new container is removed, its data
deleted (the dump or snapshot is kept), and the old container renamed back and started on
its data, untouched: the old server with its old data is what runs again.
"""

from __future__ import annotations

import contextlib
import json
import secrets as _random

import docker
import docker.errors
import docker.types
from docker.models.containers import Container

from shipway.backends import backups as files
from shipway.backends.accessories import Credentials, server_image
from shipway.backends.docker import labels
from shipway.backends.docker.accessories import (
    DATA_DIRS,
    STOP_TIMEOUT,
    DockerAccessories,
    data_dir,
)
from shipway.backends.docker.backups import HELPER, DockerBackups, _exec, _pg_env
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.containers import create, ensure_image, remove
from shipway.backends.docker.edge import edge
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError
from shipway.spec.accessories import Accessory, from_json

#: the user the data's files belong to in each kind's image
OWNER = {"postgres": "postgres", "redis": "redis"}
#: the name of the volume's directory of each kind's data after an upgrade to major N
PREFIX = {"postgres": "pg", "redis": "redis"}


def upgrade(
    b: DockerBackups,
    conn: HostConnection,
    old: Container,
    accessory: Accessory,
    creds: Credentials,
    bind: str | None,
    deadline: float,
    reporter: Reporter,
) -> Failure | None:
    """The accessory whose container is ``old`` moved to ``accessory.version``; its failure
    (the old server running again on its data), or None (the new one answers with the
    data). An InputError or BackendError before the old server is stopped: nothing done."""
    was = from_json(accessory.name, json.loads(old.labels.get(labels.UNIT) or "{}"))
    kind, before, after = accessory.kind, was.version or "", accessory.version or ""
    root, prefix = DATA_DIRS[kind], PREFIX[kind]
    client = conn.client()
    name = str(old.name)
    _, _, _, server = b._answering(was)
    image = server_image(accessory, b.environ)
    ensure_image(client, image)  # before anything is touched
    old_data = data_dir(old, kind)
    volume = labels.accessory_volume(b.app.name, b.slot.name, accessory.name)
    keys = 0
    if kind == "postgres":
        new_data, dump, script = files.upgrade_dump(root, before, after)
        tool = b._pg_dump_of(old, server)
        reporter.line(f"  accessory {accessory.name}: {tool} of postgres {server} to {dump}")
        _exec(old, ["sh", "-c", script], _pg_env(creds), "pg_dump", user="postgres")
    else:
        new_data, dump = (
            f"{root}/{prefix}{after}",
            f"{root}/shipway-upgrade-{before}-to-{after}.rdb",
        )
        reporter.line(f"  accessory {accessory.name}: BGSAVE of redis {server} to {dump}")
        keys = _snapshot(b, conn, old, creds, old_data, new_data, dump, reporter)
    kept = f"{name}-{prefix}{before}"
    new: Container | None = None
    stopped = False
    try:
        if kind == "redis":
            reporter.line(
                f"  accessory {accessory.name}: redis {after} loads the snapshot in {new_data} "
                f"(a helper container of {image}); redis {before} serves meanwhile"
            )
            b._prepare(conn, old, creds, new_data, image=image)
        reporter.line(
            f"  accessory {accessory.name}: stopping {kind} {before}; its container kept as "
            f"{kept}, its data in {old_data}"
        )
        old.stop(timeout=STOP_TIMEOUT)
        stopped = True
        old.rename(kept)
        network = labels.network(b.app.name, b.slot.name)
        spec = b._server(accessory, image, name, network, creds, bind, new_data)
        new = create(client, spec)
        new.start()
        failure = b._accessory_gate(conn, accessory, name, creds, deadline, reporter)
        if failure is not None:
            raise BackendError(" ".join([failure.message, *failure.details[-3:]]))
        new.reload()
        version = b._version(conn, new, kind, creds)
        files.new_major(kind, version, after)
        if kind == "postgres":
            b._pg_load(new, creds, version, dump, reporter)
            loaded = "the data restored"
        else:
            command, persistence = b._redis(conn, new, creds)
            files.redis_loaded(persistence)
            loaded = files.keys_loaded(keys, files.redis_keys(command), after)
    except Exception as exc:
        with edge(f"host {conn.name}: accessory {accessory.name}, put back"):
            again = _put_back(
                b, conn, old, new, was, name, new_data, creds, stopped, deadline, reporter
            )
        return Failure(
            reason=Reason.STEP_FAILED,
            message=(
                f"the upgrade of accessory {accessory.name} to {kind} {after} failed: {exc}; "
                f"{kind} {before} {again} (its data untouched in {old_data}; the "
                f"{'dump' if kind == 'postgres' else 'snapshot'} kept in {dump} in volume "
                f"{volume})"
            ),
        )
    remove(old, STOP_TIMEOUT)
    gone = files.old_cluster_gone(root, f"{prefix}{after}")
    _exec(new, ["sh", "-c", gone], {}, "deleting the old data")
    b._note(conn.name, f"upgraded accessory {accessory.name} to {kind} {after}")
    reporter.line(
        f"  accessory {accessory.name}: {kind} {after} answers with {loaded}; "
        f"{kind} {before}'s container and data deleted, the "
        f"{'dump' if kind == 'postgres' else 'snapshot'} kept in {dump}"
    )
    return None


def _snapshot(
    b: DockerBackups,
    conn: HostConnection,
    old: Container,
    creds: Credentials,
    old_data: str,
    new_data: str,
    dump: str,
    reporter: Reporter,
) -> int:
    """A ``BGSAVE`` of the old server, copied to ``dump`` (kept) and into ``new_data``
    (made anew); how many keys the old server held."""
    command, persistence = b._redis(conn, old, creds)
    files.redis_bgsave(command, persistence, reporter.line)
    keys = files.redis_keys(command)
    script = (
        f'rm -rf "{new_data}" "{dump}.partial" && umask 077 && mkdir "{new_data}" && '
        f'cp "{old_data}/dump.rdb" "{dump}.partial" && mv "{dump}.partial" "{dump}" && '
        f'cp "{dump}" "{new_data}/dump.rdb"'
    )
    _exec(old, ["sh", "-c", script], {}, "copying the snapshot", user="redis")
    return keys


def _put_back(
    b: DockerBackups,
    conn: HostConnection,
    old: Container,
    new: Container | None,
    was: Accessory,
    name: str,
    new_data: str,
    creds: Credentials,
    stopped: bool,
    deadline: float,
    reporter: Reporter,
) -> str:
    """The new container removed, the old one named back and started (``stopped``), the new
    data deleted; what the old server does now (``runs again on its data``)."""
    if new is not None:
        remove(new, STOP_TIMEOUT)
    if stopped:
        with contextlib.suppress(docker.errors.NotFound):
            stray = conn.client().containers.get(name)  # made, not yet known here
            remove(stray, STOP_TIMEOUT)
        old.rename(name)
        old.start()
    with contextlib.suppress(BackendError, docker.errors.APIError):
        _exec(old, ["rm", "-rf", new_data], {}, "deleting the new data", user=OWNER[was.kind])
    failure = b._accessory_gate(conn, was, name, creds, deadline, reporter)
    if failure is not None:
        return "was put back but does not answer"
    return "runs again on its data" if stopped else "was never stopped and serves its data"


#: how a directory of each kind's volume is seen to hold its data (``{d}``: the directory)
HOLDS = {
    "postgres": "[ -s {d}/PG_VERSION ]",
    "redis": "[ -e {d}/dump.rdb ] || [ -e {d}/appendonlydir ] || [ -e {d}/appendonly.aof ]",
}


def cluster_dir(
    b: DockerAccessories, client: docker.DockerClient, image: str, accessory: Accessory
) -> str:
    """Where the volume of an accessory without a container (``destroy`` removed it, or it
    is new) holds its data, looked at by a short container of ``image`` (no network,
    removed after): the volume's root when it holds data there (as made, or an upgrade cut
    short: the old data is never deleted before the new server answers), else
    ``pg<version>`` / ``redis<version>`` when an upgrade left it there, else the root (a
    new volume)."""
    kind = accessory.kind
    root = DATA_DIRS[kind]
    volume = labels.accessory_volume(b.app.name, b.slot.name, accessory.name)
    mine = f"{root}/{PREFIX[kind]}{accessory.version}"
    holds = HOLDS[kind]
    script = (
        f"if {holds.format(d=root)}; then echo {root}; "
        f"elif {holds.format(d=mine)}; then echo {mine}; else echo {root}; fi"
    )
    name = labels.accessory(b.app.name, b.slot.name, accessory.name)
    with edge(f"accessory {accessory.name}: where its volume holds its data"):
        said = client.containers.run(
            image,
            entrypoint=["sh", "-c", script],
            name=f"{name}-look-{_random.token_hex(3)}",
            labels={**labels.base(b.app.name, b.slot.name, HELPER)},
            mounts=[docker.types.Mount(target=root, source=volume, type="volume")],
            network_mode="none",
            remove=True,
        )
    return str(said.decode().strip() or root)
