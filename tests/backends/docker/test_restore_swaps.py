"""A restore's moments of danger on a Docker host, watched for real.

Postgres: while a restore swaps the loaded database in, a client loop in the accessory's
container asks the server, again and again, which database carries the app's name and how
many rows it holds. The name always names a database — the old one, then the restored one,
switched once (the swap is two renames in one transaction; before, the old one was dropped
first and the name named nothing until the rename: this test fails on that code). A client
is told only that its session ended, that new connections are refused for the moment, or —
a connection that arrived within the renames' transaction — that the database "seems to have
just been dropped or renamed" (Postgres looks the name up before it waits on the lock the
renames hold, and checks it again after).

Redis: once the accessory is stopped to have the restored data swapped in, the address and
port it publishes are taken by the test, so the engine refuses to start it on the new data;
the restore puts the data it replaced back and starts the accessory on it (the port given
back as the put back begins): the old keys are there after, the restored ones are not, and
what was loaded is kept aside in the volume. (A server that dies as it loads the new data
was tried first — killed on its start event — and loses the race: a small snapshot loads
and answers before the kill lands; that path is the same ``except`` branch.)"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from tests.backends.docker.conftest import SLOT, Deployment, names_in
from tests.backends.docker.test_accessories import accessory, mirror, write
from tests.backends.docker.test_backups import backed_up, deployed, psql, published, redis, shipway
from tests.backends.local.conftest import eventually
from tests.backends.test_backups import SWAP_LOOP, swap_seen

__all__ = ["mirror"]  # the fixture, used by name

pytestmark = pytest.mark.timeout(600)


def test_a_postgres_restore_never_leaves_the_name_without_a_database(
    deployment: Deployment, mirror: str, tmp_path: Path
) -> None:
    write(deployment)
    d, password = deployment, deployed(deployment)
    psql(
        d,
        password,
        "create table notes (id serial primary key, text text); "
        "insert into notes (text) select 'kept' from generate_series(1, 3)",
    )
    path = Path(backed_up(d, tmp_path)["path"])
    psql(d, password, "insert into notes (text) select 'later' from generate_series(1, 4)")
    c = accessory(d)
    env = {"PGHOST": "127.0.0.1", "PGUSER": "shipway", "PGPASSWORD": password}
    api = c.client.api
    made = api.exec_create(c.id, ["sh", "-c", SWAP_LOOP, "sh", d.name], environment=env)
    lines: list[str] = []

    def read() -> None:
        buffered = b""
        for chunk in api.exec_start(made["Id"], stream=True):
            buffered += chunk
            *whole, buffered = buffered.split(b"\n")
            lines.extend(w.decode(errors="replace") for w in whole)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    eventually(lambda: "rows:7" in lines, what="the client loop's first answers")
    r = shipway(d, "restore", SLOT, "db", str(path), "--confirm", SLOT)
    assert r.returncode == 0, r.stderr
    assert "both renames or neither" in r.stdout
    seen = len(lines)
    eventually(lambda: "rows:3" in lines[seen:], what="the loop's answers after the restore")
    c.exec_run(["touch", "/tmp/shipway-test-stop"])
    reader.join(timeout=30)
    summary = swap_seen(lines, "7", "3")
    dbs = psql(d, password, "select datname from pg_database order by 1").split()
    assert d.name in dbs and not [n for n in dbs if n.startswith(f"{d.name}.")], dbs
    print(summary)


def taken(address: str, port: int) -> socket.socket:
    """A socket listening on ``address:port`` once the engine let it go (its proxy stops a
    moment after the container's ``die`` event)."""
    deadline = time.monotonic() + 10
    while True:
        held = socket.socket()
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            held.bind((address, port))
            held.listen()
            return held
        except OSError:
            held.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def test_a_redis_restore_whose_accessory_cannot_start_on_the_new_data_puts_the_old_back(
    deployment: Deployment, mirror: str, tmp_path: Path
) -> None:
    d = deployment
    write(d, kind="redis", version="7")  # on host A, whose engine's events the test reads
    password = deployed(d)
    address, port = published(d, d.env.a)
    assert redis(address, port, password, "SET", "greeting", "restored") == b"+OK\r\n"
    path = Path(backed_up(d, tmp_path)["path"])
    assert redis(address, port, password, "FLUSHALL") == b"+OK\r\n"
    assert redis(address, port, password, "SET", "kept", "old") == b"+OK\r\n"
    c = accessory(d)
    client = d.local(d.env.a)
    said: list[str] = []
    events = client.events(filters={"type": "container"}, since=int(time.time()), decode=True)

    def squat() -> None:
        """Once the accessory is stopped for the swap, its published address and port are
        taken (its start on the new data refused by the engine); given back when the put
        back begins (its helper is made)."""
        held: socket.socket | None = None
        for event in events:
            name = str((event.get("Actor") or {}).get("Attributes", {}).get("name", ""))
            if name == c.name and event.get("Action") == "die" and held is None and not said:
                held = taken(address, port)
                said.append("taken")
            elif held is not None and name.startswith(f"{c.name}-put-back-"):
                held.close()
                said.append("given back")
                return

    watcher = threading.Thread(target=squat, daemon=True)
    watcher.start()
    try:
        r = shipway(d, "restore", SLOT, "db", str(path), "--confirm", SLOT)
    finally:
        events.close()
        client.close()
    assert said == ["taken", "given back"], (said, r.stdout + r.stderr)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "address already in use" in r.stderr
    assert "the data before it is back in place and the accessory started on it" in r.stderr
    eventually(
        lambda: redis(address, port, password, "GET", "kept") == b"$3\r\nold\r\n",
        timeout=60,
        what="the old key, the old data put back",
    )
    assert redis(address, port, password, "EXISTS", "greeting") == b":0\r\n"
    assert redis(address, port, password, "DBSIZE") == b":1\r\n"
    listed = names_in(accessory(d), "/data")
    failed = [n for n in listed if n.startswith("shipway-restore-failed.")]
    assert failed and "shipway-before-restore" not in listed, listed
    assert "shipway-restore" not in listed
    assert password not in r.stdout + r.stderr
