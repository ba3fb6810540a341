"""A Postgres accessory in a namespace moved to another major version, asked for
(``--upgrade-accessory``): a dump and restore, never the new server started on the old data.

In order, in the accessory's one claim (mounted at ``/var/lib/postgresql/data``): the old
server's pod, which must be ready, dumps the database by its own ``pg_dump`` (its major
checked, as a backup's) into ``shipway-upgrade-<old>-to-<new>.dump`` at the claim's root
(kept after), through the API server's exec; the StatefulSet is applied with the new image
and PGDATA in the claim's directory ``pg<new>`` (a fresh cluster made by the image's
entrypoint with the same credentials), its pod waited on until it is ready, the server's
version checked to be the new major, and the dump loaded as a restore loads one
(:meth:`~shipway.backends.kubernetes.backups.KubernetesBackups._pg_load`). Only then is the
old cluster's directory deleted. When any of it fails, the StatefulSet is applied as it was
(the old image, the old PGDATA: the old cluster, untouched), its pod replaced (a pod that
never became ready is not replaced by a StatefulSet on its own), the new cluster's directory
deleted (the dump is kept): the old server with its old rows is what runs again.
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
    object_name,
    pg_data,
)
from shipway.backends.kubernetes.backups import PG_ENV, KubernetesBackups
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError
from shipway.spec.accessories import Accessory, from_json

ROOT = DATA_DIRS["postgres"]


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
    before, after = was.version or "", accessory.version or ""
    pod, _, server = b._answering(was)
    old_data = pg_data(live) or f"{ROOT}/pgdata"
    new_data, dump, script = files.upgrade_dump(ROOT, before, after)
    tool = b._pg_dump_of(pod, server)
    reporter.line(f"  accessory {accessory.name}: {tool} of postgres {server} to {dump}")
    b._sh(pod, "postgres", PG_ENV + script, "pg_dump")
    reporter.line(
        f"  accessory {accessory.name}: postgres {after} in a new cluster in {new_data}; "
        f"postgres {before}'s data kept in {old_data}"
    )
    try:
        with b._edge(f"upgrading accessory {accessory.name}"):
            body = b._statefulset(accessory, new_data)
            sts = b.client.apply(from_dict(body), force=True)
        failure = b._accessory_gate(accessory, sts.metadata.generation, deadline, reporter)
        if failure is not None:
            raise BackendError(" ".join([failure.message, *failure.details[-3:]]))
        pod, _, version = b._answering(accessory)
        if files.pg_major(version) != after:
            raise BackendError(f"the new server is postgres {version}, not {after}")
        b._pg_load(pod, creds, version, dump, reporter)
    except Exception as exc:
        again = _put_back(b, was, old_data, new_data, deadline, reporter)
        return Failure(
            reason=Reason.STEP_FAILED,
            message=(
                f"the upgrade of accessory {accessory.name} to postgres {after} failed: {exc}; "
                f"postgres {before} {again} (its data untouched in {old_data}; the dump kept "
                f"in {dump} in PersistentVolumeClaim/data-{pod})"
            ),
        )
    with b._edge(f"accessory {accessory.name}: its cluster's directory"):
        note = {"metadata": {"annotations": {PGDATA_NOTE: new_data}}}
        name = object_name(b.app.name, accessory.name)
        b.client.patch(SecretObject, name, note, namespace=b.namespace)
    b._sh(pod, "postgres", files.old_cluster_gone(ROOT, f"pg{after}"), "deleting the old cluster")
    reporter.line(
        f"  accessory {accessory.name}: postgres {after} answers with the data restored; "
        f"postgres {before}'s cluster deleted, the dump kept in {dump}"
    )
    return None


def _put_back(
    b: KubernetesBackups,
    was: Accessory,
    old_data: str,
    new_data: str,
    deadline: float,
    reporter: Reporter,
) -> str:
    """The StatefulSet applied as it was and its pod replaced, the new cluster deleted;
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
        b._sh(f"{name}-0", "postgres", f'rm -rf "{new_data}"', "deleting the new cluster")
    except BackendError as exc:
        reporter.line(f"  warning: the new cluster in {new_data} was not deleted: {exc}")
    return "runs again on its data"
