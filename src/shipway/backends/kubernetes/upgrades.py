"""An accessory in a namespace moved to another major version, asked for
(``--upgrade-accessory``): the data carried over by the servers' own means, never the new
server started on the old data.

In order, in the accessory's one claim: the old server's pod, which must be ready, writes
its data out at the claim's root (kept after), through the API server's exec — Postgres: a
dump by its own ``pg_dump`` (its major checked, as a backup's),
``shipway-upgrade-<old>-to-<new>.dump``; Redis: the snapshot a backup takes (``redis-cli
--rdb``: the server forks and sends it as to a replica), ``shipway-upgrade-<old>-to-<new>.rdb``,
copied into the claim's new directory ``redis<new>``. The StatefulSet is then applied with
the new image and its data in the new directory — Postgres' PGDATA ``pg<new>`` (a fresh
cluster made by the image's entrypoint with the same credentials); Redis' ``--dir``, which a
first container of the new image makes ready (it loads the snapshot with the append-only
file off, turns the file on: :data:`~shipway.backends.kubernetes.accessories.REDIS_LOAD`) —
its pod waited on until it is ready (a container of it that exits with an error fails the
upgrade at once), the server's version checked to be the new major, then the dump loaded
as a restore loads one
(:meth:`~shipway.backends.kubernetes.backups.KubernetesBackups._pg_load`) or (Redis) its
keys counted, none missing when the old one had some. Only then is the old data deleted.
When any of it fails, the StatefulSet is applied as it was (the old image, the old
directory: the old data, untouched), its pod replaced (a pod that never became ready is not
replaced by a StatefulSet on its own), the new directory deleted (the dump or snapshot is
kept): the old server with its old data is what runs again.
"""

from __future__ import annotations

import json
from typing import Any

from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.resources.core_v1 import Secret as SecretObject

from shipway.backends import backups as files
from shipway.backends.accessories import Credentials
from shipway.backends.kubernetes.accessories import (
    DATA_DIRS,
    DECLARED,
    PGDATA_NOTE,
    data_dir,
    object_name,
)
from shipway.backends.kubernetes.backups import PG_ENV, REDIS_ENV, KubernetesBackups
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError
from shipway.spec.accessories import Accessory, from_json

#: the name of the claim's directory of each kind's data after an upgrade to major N
PREFIX = {"postgres": "pg", "redis": "redis"}
#: where each kind's data is in a claim never upgraded
FIRST = {"postgres": f"{DATA_DIRS['postgres']}/pgdata", "redis": DATA_DIRS["redis"]}


def upgrade(
    b: KubernetesBackups,
    live: Any,
    accessory: Accessory,
    creds: Credentials,
    deadline: float,
    reporter: Reporter,
) -> Failure | None:
    """The accessory whose StatefulSet is ``live`` moved to ``accessory.version``; its
    failure (the old server running again on its data), or None (the new one answers with
    the data). An InputError or BackendError before the StatefulSet is changed: nothing
    done."""
    notes = live.metadata.annotations or {}
    was = from_json(accessory.name, json.loads(notes.get(DECLARED) or "{}"))
    kind, before, after = accessory.kind, was.version or "", accessory.version or ""
    root = DATA_DIRS[kind]
    pod, _, server = b._answering(was)
    old_data = data_dir(live) or FIRST[kind]
    keys = 0
    if kind == "postgres":
        new_data, dump, script = files.upgrade_dump(root, before, after)
        tool = b._pg_dump_of(pod, server)
        reporter.line(f"  accessory {accessory.name}: {tool} of postgres {server} to {dump}")
        b._sh(pod, "postgres", PG_ENV + script, "pg_dump")
    else:
        new_data = f"{root}/{PREFIX[kind]}{after}"
        dump = f"{root}/shipway-upgrade-{before}-to-{after}.rdb"
        reporter.line(f"  accessory {accessory.name}: redis-cli --rdb of redis {server} to {dump}")
        said = b._sh(
            pod, "redis", REDIS_SNAPSHOT.format(new=new_data, dump=dump), "redis-cli --rdb"
        )
        keys = _keys(said)
    reporter.line(
        f"  accessory {accessory.name}: {kind} {after} in {new_data}; "
        f"{kind} {before}'s data kept in {old_data}"
    )
    try:
        with b._edge(f"upgrading accessory {accessory.name}"):
            body = b._statefulset(accessory, new_data)
            sts = b.client.apply(from_dict(body), force=True)
        failure = b._accessory_gate(accessory, sts.metadata.generation, deadline, reporter, True)
        if failure is not None:
            raise BackendError(" ".join([failure.message, *failure.details[-3:]]))
        pod, _, version = b._answering(accessory)
        files.new_major(kind, version, after)
        if kind == "postgres":
            b._pg_load(pod, creds, version, dump, reporter)
            loaded = "the data restored"
        else:
            now = _keys(b._sh(pod, "redis", REDIS_KEYS, "redis-cli DBSIZE"))
            loaded = files.keys_loaded(keys, now, after)
    except Exception as exc:
        again = _put_back(b, was, old_data, new_data, deadline, reporter)
        return Failure(
            reason=Reason.STEP_FAILED,
            message=(
                f"the upgrade of accessory {accessory.name} to {kind} {after} failed: {exc}; "
                f"{kind} {before} {again} (its data untouched in {old_data}; the "
                f"{'dump' if kind == 'postgres' else 'snapshot'} kept in {dump} in "
                f"PersistentVolumeClaim/data-{pod})"
            ),
        )
    with b._edge(f"accessory {accessory.name}: its data's directory"):
        note = {"metadata": {"annotations": {PGDATA_NOTE: new_data}}}
        name = object_name(b.app.name, accessory.name)
        b.client.patch(SecretObject, name, note, namespace=b.namespace)
    gone = files.old_cluster_gone(root, f"{PREFIX[kind]}{after}")
    b._sh(pod, kind, gone, "deleting the old data")
    reporter.line(
        f"  accessory {accessory.name}: {kind} {after} answers with {loaded}; "
        f"{kind} {before}'s data deleted, the "
        f"{'dump' if kind == 'postgres' else 'snapshot'} kept in {dump}"
    )
    return None


#: the snapshot a backup takes, written to ``{dump}`` (under a partial name, renamed when
#: whole) and copied into ``{new}`` (made anew); then how many keys the server holds
REDIS_SNAPSHOT = REDIS_ENV + (
    'rm -rf "{new}" "{dump}.partial" && umask 077 && redis-cli --rdb "{dump}.partial" >&2 && '
    'mv "{dump}.partial" "{dump}" && mkdir "{new}" && cp "{dump}" "{new}/dump.rdb" && '
    "redis-cli DBSIZE"
)


#: how many keys the server holds, once it has loaded its data (it answers INFO while it
#: loads, and DBSIZE with -LOADING)
REDIS_KEYS = REDIS_ENV + (
    "until [ \"$(redis-cli INFO persistence | tr -d '\\r' | grep '^loading:' | cut -d: -f2)\" "
    "= 0 ]; do sleep 0.1; done; redis-cli DBSIZE"
)


def _keys(said: str) -> int:
    """The count a ``redis-cli DBSIZE`` printed (its last line that is a number)."""
    found = [w for w in said.split() if w.isdigit()]
    if not found:
        raise BackendError(f"redis-cli DBSIZE said {said[-200:]!r}")
    return int(found[-1])


def _put_back(
    b: KubernetesBackups,
    was: Accessory,
    old_data: str,
    new_data: str,
    deadline: float,
    reporter: Reporter,
) -> str:
    """The StatefulSet applied as it was and its pod replaced, the new data deleted;
    what the old server does now (``runs again on its data``)."""
    name = object_name(b.app.name, was.name)
    with b._edge(f"putting accessory {was.name} back"):
        sts = b.client.apply(from_dict(b._statefulset(was, old_data)), force=True)
        try:
            b.client.delete(Pod, f"{name}-0", namespace=b.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
    failure = b._accessory_gate(was, sts.metadata.generation, deadline, reporter)
    if failure is not None:
        return "was put back but is not ready"
    try:
        b._sh(f"{name}-0", was.kind, f'rm -rf "{new_data}"', "deleting the new data")
    except BackendError as exc:
        reporter.line(f"  warning: the new data in {new_data} was not deleted: {exc}")
    return "runs again on its data"
