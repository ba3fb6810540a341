"""Backups of accessories on Kubernetes, on the test plane's real node, through the real CLI:
a Postgres and a Redis accessory of one slot, each backed up through the API server's exec of
its pod (``pg_dump`` of its own image; ``redis-cli --rdb``), their data then replaced by other
data, each backup restored (``--confirm``), and the first data found again — Redis' still
there after its pod is deleted and made anew by its StatefulSet (its append-only file was
rewritten from the snapshot); a corrupted file refused with exit 2 and the pod untouched.

Each claim gets a hostPath PersistentVolume of its own on the real node, as in
test_accessories.py; the images are the test environment's ``postgres:15`` and ``redis:7``."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import (
    HostPathVolumeSource,
    ObjectReference,
    PersistentVolumeSpec,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import PersistentVolume, Pod

from tests.backends.test_backups import sealed

from .conftest import Slot
from .test_accessories import WEB, mirror
from .test_rbac import documented_role
from .test_real_pods import app_name, image

__all__ = ["mirror"]  # the fixture, used by name

pytestmark = [pytest.mark.k8s, pytest.mark.real_node, pytest.mark.timeout(600)]

#: test_accessories' app and Postgres accessory, and a Redis one beside it
SPEC = WEB.replace(
    "[secrets]", '[accessories.cache]\nkind = "redis"\nversion = "7"\nsize = "1Gi"\n\n[secrets]'
).replace("[slots.test1]", 'REDIS_URL = {{ from_accessory = "cache" }}\n\n[slots.test1]')

PSQL = (
    'PGPASSWORD="$POSTGRES_PASSWORD" psql -h 127.0.0.1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" '
    "-X -At -v ON_ERROR_STOP=1 -c "
)
REDIS = 'REDISCLI_AUTH="$REDIS_PASSWORD" redis-cli '


@pytest.fixture
def volumes(real_slot: Slot, tmp_path: Path) -> Iterator[None]:
    """A hostPath PersistentVolume on the real node for each accessory's claim."""
    name = app_name(real_slot)
    made = []
    for accessory in ("db", "cache"):
        pv = PersistentVolume(
            metadata=ObjectMeta(name=f"{name}-{accessory}"),
            spec=PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                accessModes=["ReadWriteOnce"],
                hostPath=HostPathVolumeSource(
                    path=str(tmp_path / f"pv-{accessory}"), type="DirectoryOrCreate"
                ),
                claimRef=ObjectReference(
                    namespace=real_slot.namespace, name=f"data-{name}-acc-{accessory}-0"
                ),
                persistentVolumeReclaimPolicy="Retain",
            ),
        )
        real_slot.client.create(pv)
        made.append(f"{name}-{accessory}")
    yield
    for pv_name in made:
        real_slot.client.delete(PersistentVolume, pv_name)


def sh(slot: Slot, pod: str, container: str, script: str) -> str:
    """``sh -c script`` in the pod (the test's own exec, through lightkube's asynchronous
    client, as shipway's: the synchronous one's WebSocket session is unsafe): its output."""

    async def run() -> Any:
        client = AsyncClient(config=slot.client.config)
        try:
            return await client.exec(
                pod, namespace=slot.namespace, container=container, command=["sh", "-c", script],
                stdout=out, stderr=err, decode=None, timeout=60,
            )  # fmt: skip
        finally:
            await client.close()

    out, err = io.BytesIO(), io.BytesIO()
    done = asyncio.run(run())
    assert done.exit_code == 0, err.getvalue()
    return out.getvalue().decode().strip()


def backed_up(
    slot: Slot, accessory: str, out: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    r = slot.cli("backup", "test1", accessory, "--out", str(out), "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    return sealed(r.stdout)


def ready_pod(slot: Slot, name: str, not_uid: str | None = None) -> Any:
    """The pod once it is ready (another one than ``not_uid``)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            pod = slot.client.get(Pod, name, namespace=slot.namespace)
        except Exception:  # made anew: not there yet
            pod = None
        statuses = (pod.status.containerStatuses if pod and pod.status else None) or []
        if pod and pod.metadata.uid != not_uid and statuses and all(s.ready for s in statuses):
            return pod
        assert time.monotonic() < deadline, f"pod {name} not ready"
        time.sleep(0.5)


def test_backups_restore_through_exec(
    real_slot: Slot,
    volumes: None,
    mirror: str,
    tmp_path: Path,
    mint_kubeconfig: Callable[..., Path],
) -> None:
    s = real_slot
    name = app_name(s)
    app = s.write(SPEC, name=name, image=image("v1"))
    _, lines = s.deploy(app, timeout=300)
    assert "is ready" in lines.text, lines.text
    db, cache = f"{name}-acc-db-0", f"{name}-acc-cache-0"
    sh(s, db, "postgres", PSQL + "'create table notes (id serial primary key, text text)'")
    sh(s, db, "postgres", PSQL + "\"insert into notes (text) values ('one'), ('two')\"")
    assert sh(s, cache, "redis", REDIS + "SET greeting hello") == "OK"
    assert sh(s, cache, "redis", REDIS + "RPUSH queue a b c") == "3"

    # backed up by an identity with the documented Role alone (pods/exec: create)
    role = mint_kubeconfig(s.namespace, documented_role()["rules"], name="backups")
    pg = backed_up(s, "db", tmp_path, env={"KUBECONFIG": str(role)})
    rdb = backed_up(s, "cache", tmp_path)
    pg_path, rdb_path = Path(pg["path"]), Path(rdb["path"])
    assert pg_path.read_bytes().startswith(b"PGDMP") and rdb_path.read_bytes().startswith(b"REDIS")
    assert str(pg["made_by"]).startswith("pg_dump 15.") and db in pg["made_by"]
    assert str(pg["server_version"]).startswith("15.")
    assert str(rdb["server_version"]).startswith("7.")

    # a corrupted copy is refused: exit 2, the pod and its rows as they were
    bad = tmp_path / "bad.dump"
    data = bytearray(pg_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    (tmp_path / "bad.dump.sha256").write_text(f"{pg['sha256']}  bad.dump\n")
    before = s.client.get(Pod, db, namespace=s.namespace)
    r = s.cli("restore", "test1", "db", str(bad), "--confirm", "test1")
    assert r.returncode == 2 and "corrupted" in r.stderr, r.stderr

    # other data in both, then the backups put back
    sh(s, db, "postgres", PSQL + "'delete from notes'")
    sh(s, db, "postgres", PSQL + "\"insert into notes (text) values ('stale')\"")
    assert sh(s, cache, "redis", REDIS + "FLUSHALL") == "OK"
    assert sh(s, cache, "redis", REDIS + "SET stale x") == "OK"
    r = s.cli("restore", "test1", "db", str(pg_path))
    assert r.returncode == 3 and "--confirm test1" in r.stderr, r.stderr
    r = s.cli(
        "restore", "test1", "db", str(pg_path), "--confirm", "test1", env={"KUBECONFIG": str(role)}
    )
    assert r.returncode == 0, r.stderr
    assert f"database {name} replaced" in r.stdout
    assert sh(s, db, "postgres", PSQL + "'select text from notes order by id'") == "one\ntwo"
    dbs = sh(s, db, "postgres", PSQL + "'select datname from pg_database'").split()
    assert f"{name}.restoring" not in dbs
    assert sh(s, db, "postgres", "ls /tmp | grep -c restore || true") == "0"
    after = s.client.get(Pod, db, namespace=s.namespace)
    assert after.metadata.uid == before.metadata.uid  # never restarted

    r = s.cli("restore", "test1", "cache", str(rdb_path), "--confirm", "test1")
    assert r.returncode == 0, r.stderr
    assert "its whole data set replaced" in r.stdout
    assert sh(s, cache, "redis", REDIS + "GET greeting") == "hello"
    assert sh(s, cache, "redis", REDIS + "LLEN queue") == "3"
    assert sh(s, cache, "redis", REDIS + "EXISTS stale") == "0"
    assert sh(s, cache, "redis", REDIS + "ROLE | head -1") == "master"
    assert "shipway-restore" not in sh(s, cache, "redis", "ls -A /data")

    # its pod deleted and made anew: it loads its append-only file, rewritten from the snapshot
    old = s.client.get(Pod, cache, namespace=s.namespace)
    s.client.delete(Pod, cache, namespace=s.namespace)
    ready_pod(s, cache, not_uid=old.metadata.uid)
    got = ""
    deadline = time.monotonic() + 60
    while got != "hello" and time.monotonic() < deadline:  # loading: -LOADING until done
        got = sh(s, cache, "redis", REDIS + "GET greeting")
        if got != "hello":
            time.sleep(0.3)
    assert got == "hello"
    passwords = [
        base64.b64decode(s.secret(f"{name}-acc-{a}").data["password"]).decode()
        for a in ("db", "cache")
    ]
    for text in (r.stdout, r.stderr, json.dumps(pg), json.dumps(rdb)):
        assert not any(p in text for p in passwords)
