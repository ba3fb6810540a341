"""A Postgres accessory on a Docker host moved to another major version, asked for
(``--upgrade-accessory``): a dump and restore, never the new server started on the old data.

In order, in the accessory's one volume: the image of the new major is pulled first (nothing
is touched when it cannot be had); the old server, which must answer, is dumped by its own
``pg_dump`` (its major checked, as a backup's) into ``shipway-upgrade-<old>-to-<new>.dump``
at the volume's root (kept after); the old container is stopped and renamed
``<name>-pg<old>`` (kept, with its data where it was); a new container of the new image is
started with its cluster in the volume's directory ``pg<new>`` (its PGDATA; a fresh cluster
made by the image's entrypoint with the same credentials), waited on until it answers, its
version checked to be the new major, and the dump loaded into it as a restore loads one
(:meth:`~shipway.backends.docker.backups.DockerBackups._pg_load`). Only then are the old
container and the old cluster's files deleted. When any of it fails, the new container is
removed, its cluster deleted (the dump is kept), and the old container renamed back and
started on its data, untouched: the old server with its old rows is what runs again.
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
    pg_data,
)
from shipway.backends.docker.backups import HELPER, DockerBackups, _exec, _pg_env
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.containers import create, ensure_image, remove
from shipway.backends.docker.edge import edge
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError
from shipway.spec.accessories import Accessory, from_json

ROOT = DATA_DIRS["postgres"]


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
    before, after = was.version or "", accessory.version or ""
    client = conn.client()
    name = str(old.name)
    _, _, _, server = b._answering(was)
    image = server_image(accessory, b.environ)
    ensure_image(client, image)  # before anything is touched
    old_data = pg_data(old)
    new_data, dump, script = files.upgrade_dump(ROOT, before, after)
    tool = b._pg_dump_of(old, server)
    reporter.line(f"  accessory {accessory.name}: {tool} of postgres {server} to {dump}")
    _exec(old, ["sh", "-c", script], _pg_env(creds), "pg_dump", user="postgres")
    kept = f"{name}-pg{before}"
    reporter.line(
        f"  accessory {accessory.name}: stopping postgres {before}; its container kept as "
        f"{kept}, its data in {old_data}"
    )
    old.stop(timeout=STOP_TIMEOUT)
    old.rename(kept)
    network = labels.network(b.app.name, b.slot.name)
    new: Container | None = None
    try:
        spec = b._server(accessory, image, name, network, creds, bind, new_data)
        new = create(client, spec)
        new.start()
        failure = b._accessory_gate(conn, accessory, name, creds, deadline, reporter)
        if failure is not None:
            raise BackendError(" ".join([failure.message, *failure.details[-3:]]))
        new.reload()
        version = b._version(conn, new, "postgres", creds)
        if files.pg_major(version) != after:
            raise BackendError(f"the new server is postgres {version}, not {after}")
        b._pg_load(new, creds, version, dump, reporter)
    except Exception as exc:
        with edge(f"host {conn.name}: accessory {accessory.name}, put back"):
            again = _put_back(b, conn, old, new, was, name, new_data, creds, deadline, reporter)
        return Failure(
            reason=Reason.STEP_FAILED,
            message=(
                f"the upgrade of accessory {accessory.name} to postgres {after} failed: {exc}; "
                f"postgres {before} {again} (its data untouched in {old_data}; the dump kept "
                f"in {dump} in volume "
                f"{labels.accessory_volume(b.app.name, b.slot.name, accessory.name)})"
            ),
        )
    remove(old, STOP_TIMEOUT)
    gone = files.old_cluster_gone(ROOT, after)
    _exec(new, ["sh", "-c", gone], {}, "deleting the old cluster")
    b._note(conn.name, f"upgraded accessory {accessory.name} to postgres {after}")
    reporter.line(
        f"  accessory {accessory.name}: postgres {after} answers with the data restored; "
        f"postgres {before}'s container and cluster deleted, the dump kept in {dump}"
    )
    return None


def _put_back(
    b: DockerBackups,
    conn: HostConnection,
    old: Container,
    new: Container | None,
    was: Accessory,
    name: str,
    new_data: str,
    creds: Credentials,
    deadline: float,
    reporter: Reporter,
) -> str:
    """The new container removed, the old one named back and started, the new cluster
    deleted; what the old server does now (``runs again on its data``)."""
    if new is not None:
        remove(new, STOP_TIMEOUT)
    with contextlib.suppress(docker.errors.NotFound):
        stray = conn.client().containers.get(name)  # made, not yet known here
        remove(stray, STOP_TIMEOUT)
    old.rename(name)
    old.start()
    with contextlib.suppress(BackendError, docker.errors.APIError):
        _exec(old, ["rm", "-rf", new_data], {}, "deleting the new cluster", user="postgres")
    failure = b._accessory_gate(conn, was, name, creds, deadline, reporter)
    return "runs again on its data" if failure is None else "was put back but does not answer"


def cluster_dir(
    b: DockerAccessories, client: docker.DockerClient, image: str, accessory: Accessory
) -> str:
    """Where the volume of a Postgres accessory without a container (``destroy`` removed it,
    or it is new) holds its cluster, looked at by a short container of ``image`` (no
    network, removed after): the volume's root when it holds one there (as made, or an
    upgrade cut short: the old cluster is never deleted before the new one answers), else
    ``pg<version>`` when an upgrade left it there, else the root (a new volume)."""
    volume = labels.accessory_volume(b.app.name, b.slot.name, accessory.name)
    mine = f"{ROOT}/pg{accessory.version}"
    script = (
        f"if [ -s {ROOT}/PG_VERSION ]; then echo {ROOT}; "
        f"elif [ -s {mine}/PG_VERSION ]; then echo {mine}; else echo {ROOT}; fi"
    )
    name = labels.accessory(b.app.name, b.slot.name, accessory.name)
    with edge(f"accessory {accessory.name}: where its volume holds its cluster"):
        said = client.containers.run(
            image,
            entrypoint=["sh", "-c", script],
            name=f"{name}-look-{_random.token_hex(3)}",
            labels={**labels.base(b.app.name, b.slot.name, HELPER)},
            mounts=[docker.types.Mount(target=ROOT, source=volume, type="volume")],
            network_mode="none",
            remove=True,
        )
    return str(said.decode().strip() or ROOT)
