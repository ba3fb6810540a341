"""Backups of accessories on the Docker hosts, restored for real, through the real CLI: a
Postgres accessory on host A of the two-host slot dumped by the ``pg_dump`` of its own image
(its output streamed out of an exec), the slot destroyed with its volumes and deployed anew
(a fresh, empty accessory with another password), the file restored, the rows found; a Redis
snapshot likewise (the accessory on host B, reached over SSH), the restored data still there
after the accessory is restarted (its append-only file was rewritten from the snapshot); a
corrupted file refused with exit 2 and nothing touched (the same container, its data as it
was, no helper left).

The images are the test environment's ``postgres:15`` and ``redis:7`` (Debian's packages),
as a user's private mirror of the official ones (``SHIPWAY_ACCESSORY_MIRROR``)."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.docker.execs import run_in
from shipway.engine import Rolled
from tests import cliproc
from tests.backends.docker.conftest import SLOT, Deployment, Lines, names_in
from tests.backends.docker.test_accessories import accessory, mirror, write
from tests.backends.local.conftest import eventually
from tests.backends.test_backups import sealed
from tests.testenv.docker import DockerHost

__all__ = ["mirror"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(600)


def shipway(d: Deployment, *args: str) -> subprocess.CompletedProcess[str]:
    return cliproc.run(
        [sys.executable, "-m", "shipway", "-f", str(d.spec_file), *args],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )  # fmt: skip


def on(d: Deployment, host: DockerHost) -> Any:
    """The accessory's container on ``host``."""
    client = d.local(host)
    try:
        return client.containers.get(f"shipway-{d.name}-{SLOT}-acc-db")
    finally:
        client.close()


def password_on(d: Deployment, host: DockerHost) -> str:
    client = d.local(host)
    try:
        [volume] = client.volumes.list(filters={"name": f"shipway-{d.name}-{SLOT}-acc-db-data"})
        return str(volume.attrs["Labels"]["org.shipway.accessory.password"])
    finally:
        client.close()


def deployed(d: Deployment, host: DockerHost | None = None) -> str:
    """Deploy the slot; the accessory's password (its volume on ``host``: default A)."""
    lines = Lines()
    outcome = d.deploy(lines)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()
    return password_on(d, host or d.env.a)


def psql(d: Deployment, password: str, sql: str) -> str:
    """``sql`` run by psql in the accessory's container, its rows as lines (read whole:
    docker-py's ``exec_run`` lost the output now and then under load, :func:`run_in`)."""
    env = {"PGHOST": "127.0.0.1", "PGUSER": "shipway", "PGPASSWORD": password}
    command = ["psql", "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", d.name, "-c", sql]
    code, output = run_in(accessory(d), command, environment=env)
    assert code == 0, output
    return output.decode().strip()


def backed_up(d: Deployment, out: Path) -> dict[str, Any]:
    r = shipway(d, "backup", SLOT, "db", "--out", str(out), "-o", "json")
    assert r.returncode == 0, r.stderr
    return sealed(r.stdout)


def trusted(path: Path) -> None:
    """A checksum made for ``path`` as it is (as a user who trusts a file would)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    path.with_name(path.name + ".sha256").write_text(f"{digest}  {path.name}\n")


def helpers(d: Deployment, host: DockerHost) -> list[Any]:
    """The restore's helper containers left on ``host`` (none, ever)."""
    return d.containers(host, kind="accessory-restore")


def test_a_postgres_backup_restores_into_a_fresh_accessory_with_its_rows(
    deployment: Deployment, mirror: str, tmp_path: Path
) -> None:
    d = deployment
    write(d)
    password = deployed(d)
    psql(d, password, "create table notes (id serial primary key, text text)")
    psql(d, password, "insert into notes (text) values ('one'), ('two')")

    doc = backed_up(d, tmp_path)
    path = Path(doc["path"])
    assert path.name.startswith(f"{d.name}-{SLOT}-db-") and path.name.endswith(".dump")
    assert path.read_bytes().startswith(b"PGDMP")  # pg_dump's custom format
    assert str(doc["server_version"]).startswith("15.")
    assert str(doc["made_by"]).startswith("pg_dump 15.")  # the server's own major
    assert f"shipway-{d.name}-{SLOT}-acc-db" in doc["made_by"]

    # a corrupted copy (its checksum the original's) is refused: exit 2, nothing touched
    bad = tmp_path / "bad.dump"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    (tmp_path / "bad.dump.sha256").write_text(f"{doc['sha256']}  bad.dump\n")
    psql(d, password, "insert into notes (text) values ('after')")
    before = accessory(d).attrs["State"]["StartedAt"]
    r = shipway(d, "restore", SLOT, "db", str(bad), "--confirm", SLOT)
    assert r.returncode == 2, r.stderr
    assert "corrupted" in r.stderr and "nothing was restored" in r.stderr
    assert psql(d, password, "select text from notes order by id") == "one\ntwo\nafter"
    assert accessory(d).attrs["State"]["StartedAt"] == before
    assert run_in(accessory(d), ["sh", "-c", "ls /tmp | grep -c restore"])[1] == b"0\n"
    # a dump cut short, with a checksum made for it: it fails to load, in a database of its
    # own, and the app's is as it was
    bad.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    trusted(bad)
    r = shipway(d, "restore", SLOT, "db", str(bad), "--confirm", SLOT)
    assert r.returncode == 1 and "pg_restore in container" in r.stderr, r.stderr
    assert psql(d, password, "select text from notes order by id") == "one\ntwo\nafter"
    dbs = psql(d, password, "select datname from pg_database order by 1").split()
    assert f"{d.name}.restoring" not in dbs
    assert accessory(d).attrs["State"]["StartedAt"] == before

    # the slot destroyed with its data, deployed anew: a fresh accessory, no table
    r = shipway(d, "destroy", SLOT, "--volumes", "--confirm", SLOT)
    assert r.returncode == 0, r.stderr
    fresh = deployed(d)
    assert fresh != password
    assert psql(d, fresh, "select count(*) from pg_tables where tablename = 'notes'") == "0"
    # a restore replaces data: it needs the slot's name typed back
    r = shipway(d, "restore", SLOT, "db", str(path))
    assert r.returncode == 3 and f"--confirm {SLOT}" in r.stderr, r.stderr
    r = shipway(d, "restore", SLOT, "db", str(path), "--confirm", SLOT)
    assert r.returncode == 0, r.stderr
    assert "sha256 matches" in r.stdout and f"database {d.name} replaced" in r.stdout
    assert psql(d, fresh, "select text from notes order by id") == "one\ntwo"
    # the staging database was swapped in, and the copy of the file in the container removed
    dbs = psql(d, fresh, "select datname from pg_database order by 1").split()
    assert d.name in dbs and f"{d.name}.restoring" not in dbs
    assert run_in(accessory(d), ["sh", "-c", "ls /tmp | grep -c restore"])[1] == b"0\n"
    for text in (r.stdout, r.stderr, json.dumps(doc)):
        assert password not in text and fresh not in text


def redis(address: str, port: int, password: str, *words: str) -> bytes:
    """One command after AUTH over the published port: its reply (a line, or a bulk string
    with its length line)."""
    sent = b""
    for ws in (("AUTH", password), words):
        sent += b"*%d\r\n" % len(ws) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w.encode()) for w in ws)
    with socket.create_connection((address, port), timeout=10) as sock:
        sock.sendall(sent)
        got = b""
        while not whole(got):
            chunk = sock.recv(4096)
            assert chunk, got
            got += chunk
    assert got.startswith(b"+OK\r\n"), got
    return got[5:]


def whole(got: bytes) -> bool:
    """The AUTH reply and one more read whole."""
    _, sep, rest = got.partition(b"\r\n")
    head, sep2, body = rest.partition(b"\r\n")
    if not (sep and sep2):
        return False
    if not head.startswith(b"$") or head == b"$-1":
        return True
    return len(body) >= int(head[1:]) + 2


def published(d: Deployment, host: DockerHost) -> tuple[str, int]:
    [binding] = on(d, host).attrs["HostConfig"]["PortBindings"]["6379/tcp"]
    return binding["HostIp"], int(binding["HostPort"])


def test_a_redis_snapshot_restores_into_a_fresh_accessory_and_survives_a_restart(
    deployment: Deployment, mirror: str, tmp_path: Path
) -> None:
    d = deployment
    b = d.env.b  # over SSH: exec, get_archive, put_archive and helpers through its connection
    write(d, kind="redis", version="7", where=f'host = "{b.url}"')
    password = deployed(d, b)
    address, port = published(d, b)
    assert redis(address, port, password, "SET", "greeting", "hello") == b"+OK\r\n"
    assert redis(address, port, password, "RPUSH", "queue", "a", "b", "c") == b":3\r\n"

    doc = backed_up(d, tmp_path)
    path = Path(doc["path"])
    assert path.name.endswith(".rdb") and path.read_bytes().startswith(b"REDIS")
    assert str(doc["server_version"]).startswith("7.") and doc["made_by"].startswith("BGSAVE")

    # a corrupted copy is refused: exit 2, the server as it was
    bad = tmp_path / "bad.rdb"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    (tmp_path / "bad.rdb.sha256").write_text(f"{doc['sha256']}  bad.rdb\n")
    assert redis(address, port, password, "SET", "after", "1") == b"+OK\r\n"
    before = on(d, b).attrs["State"]["StartedAt"]
    r = shipway(d, "restore", SLOT, "db", str(bad), "--confirm", SLOT)
    assert r.returncode == 2 and "corrupted" in r.stderr, r.stderr
    assert on(d, b).attrs["State"]["StartedAt"] == before
    assert redis(address, port, password, "GET", "after") == b"$1\r\n1\r\n"
    assert helpers(d, b) == []
    # the same file with a checksum made for it: a server of the image refuses to load it,
    # and the accessory is never stopped
    trusted(bad)
    r = shipway(d, "restore", SLOT, "db", str(bad), "--confirm", SLOT)
    assert r.returncode == 1 and "did not load the snapshot" in r.stderr, r.stderr
    assert on(d, b).attrs["State"]["StartedAt"] == before
    assert redis(address, port, password, "GET", "greeting") == b"$5\r\nhello\r\n"
    assert helpers(d, b) == []
    listed = names_in(on(d, b), "/data")
    assert not [n for n in listed if n.startswith("shipway-")], listed

    # the slot destroyed with its data, deployed anew: a fresh, empty accessory
    r = shipway(d, "destroy", SLOT, "--volumes", "--confirm", SLOT)
    assert r.returncode == 0, r.stderr
    fresh = deployed(d, b)
    address, port = published(d, b)
    assert redis(address, port, fresh, "DBSIZE") == b":0\r\n"
    assert redis(address, port, fresh, "SET", "stale", "x") == b"+OK\r\n"
    r = shipway(d, "restore", SLOT, "db", str(path), "--confirm", SLOT)
    assert r.returncode == 0, r.stderr
    assert "its whole data set replaced" in r.stdout
    assert redis(address, port, fresh, "GET", "greeting") == b"$5\r\nhello\r\n"
    assert redis(address, port, fresh, "LLEN", "queue") == b":3\r\n"
    assert redis(address, port, fresh, "EXISTS", "stale") == b":0\r\n"
    assert helpers(d, b) == []
    listed = names_in(on(d, b), "/data")
    assert not [n for n in listed if n.startswith("shipway-")], listed

    # restarted, it loads its append-only file: the restored data is what that file holds
    assert redis(address, port, fresh, "CONFIG", "GET", "appendonly").endswith(b"yes\r\n")
    c = on(d, b)
    c.restart(timeout=30)
    eventually(
        lambda: redis(address, port, fresh, "GET", "greeting") == b"$5\r\nhello\r\n",
        timeout=60,
        what="the restored key after a restart",
    )
    assert on(d, b).attrs["State"]["StartedAt"] != c.attrs["State"]["StartedAt"]
    for text in (r.stdout, r.stderr, json.dumps(doc)):
        assert password not in text and fresh not in text
