"""Accessories on this machine: a real Postgres (Debian's postgresql-15) and a real Redis,
supervised beside the app; an app's deploy, rollback and restart never restart them; their
data outlives every release; their password is never shown; they listen on loopback only.
Real processes, real servers, the real CLI."""

from __future__ import annotations

import json
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.local.servers import pg_bin
from tests.backends.local.conftest import Slot

pytestmark = pytest.mark.skipif(
    not (pg_bin("15") / "postgres").is_file(), reason="postgresql-15 is not installed"
)

#: a web process that writes rows to its Postgres (GET /write?TEXT) and lists them (GET /)
PG_APP = r"""
import http.server, os, urllib.parse
import psycopg

RELEASE = os.environ.get("SHIPWAY_RELEASE", "dev")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as db:
            if url.path == "/up":
                db.execute("select 1 from notes limit 1")
                body = "ok\n"
            elif url.path == "/write":
                db.execute("insert into notes (text) values (%s)", (f"{url.query} by {RELEASE}",))
                body = "written\n"
            else:
                rows = db.execute("select text from notes order by id").fetchall()
                body = "".join(f"{r[0]}\n" for r in rows) or "(none)\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""

MIGRATE = r"""
import os, psycopg
with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as db:
    db.execute("create table if not exists notes (id serial primary key, text text)")
print("migrated")
"""

SPEC = """
[app]
name = "hello"
release_command = "python3 migrate.py"

[processes.web]
command = "python3 pgapp.py"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 100

[env]
EDITION = "1"

[accessories.db]
kind = "postgres"
version = "15"

[secrets]
DATABASE_URL = { from_accessory = "db" }
"""


@pytest.fixture
def pg(slot: Slot) -> Slot:
    (slot.app_dir / "pgapp.py").write_text(PG_APP)
    (slot.app_dir / "migrate.py").write_text(MIGRATE)
    slot.spec.write_text(SPEC)
    return slot


def accessory_dir(slot: Slot, name: str = "db", app: str = "hello") -> Path:
    return slot.state / app / "local" / "accessories" / name


def password(slot: Slot, name: str = "db", app: str = "hello") -> str:
    path = accessory_dir(slot, name, app) / "credentials.json"
    doc: dict[str, Any] = json.loads(path.read_text())
    return str(doc["password"])


def server_pid(slot: Slot, name: str = "db", app: str = "hello") -> int:
    info = slot.supervisor().info()[f"acc.{app}.local.{name}"]
    assert info["statename"] == "RUNNING", info
    return int(info["pid"])


def next_edition(slot: Slot) -> None:
    text = slot.spec.read_text()
    n = int(text.split('EDITION = "')[1].split('"')[0])
    slot.spec.write_text(text.replace(f'EDITION = "{n}"', f'EDITION = "{n + 1}"'))


def test_postgres_beside_the_app_outlives_its_deploys_rollbacks_and_restarts(pg: Slot) -> None:
    outputs = []
    r = pg.run("plan", "local")
    assert r.code == 0, r.text
    assert "create accessory db (postgres 15)" in r.out
    outputs.append(r.text)
    r = pg.deploy()
    outputs.append(r.text)
    assert "create accessory db (postgres 15)" in r.out
    assert "accessory db (postgres 15) answers on 127.0.0.1:" in r.out
    assert "migrated" in r.out
    secret = password(pg)
    mode = (accessory_dir(pg) / "credentials.json").stat().st_mode & 0o777
    assert mode == 0o600
    pid = server_pid(pg)
    assert pg.get("/write?one") == (200, "written\n")

    next_edition(pg)
    r = pg.deploy()
    outputs.append(r.text)
    assert "rolled hello/local from r1 to r2" in r.out
    assert "accessory" not in r.out.split("(made from")[0]  # nothing to do for it
    assert server_pid(pg) == pid
    assert pg.get("/") == (200, "one by r1\n")
    assert pg.get("/write?two") == (200, "written\n")

    r = pg.run("rollback", "local", "1")
    outputs.append(r.text)
    assert r.code == 0, r.text
    assert server_pid(pg) == pid
    assert pg.get("/") == (200, "one by r1\ntwo by r2\n")

    r = pg.run("restart", "local", "web")
    outputs.append(r.text)
    assert r.code == 0, r.text
    assert server_pid(pg) == pid

    r = pg.run("deploy", "local", "--force", "-o", "json")
    outputs.append(r.text)
    assert r.code == 0, r.text
    assert server_pid(pg) == pid
    assert password(pg) == secret  # the credentials were made once

    # shipway run reaches it through the link (its standard output is the command's own,
    # unmasked on purpose: docs/security.md; what shipway itself says is masked)
    probe = (
        "import os, psycopg; u = os.environ['DATABASE_URL']; "
        "print('rows', psycopg.connect(u).execute('select count(*) from notes').fetchone()[0])"
    )
    r = pg.run("run", "local", "--", "python3", "-c", probe)
    outputs.append(r.text)
    assert r.code == 0, r.text
    assert "rows 2" in r.out

    for args in (("status", "local"), ("plan", "local"), ("history", "local"), ("logs", "local")):
        for extra in ((), ("-o", "json")):
            r = pg.run(*args, *extra)
            assert r.code == 0, r.text
            outputs.append(r.text)
    status = pg.status()
    (db,) = status["accessories"]
    assert (db["name"], db["kind"], db["version"], db["state"]) == (
        "db",
        "postgres",
        "15",
        "running",
    )
    assert db["healthy"] is True
    assert db["data_bytes"] > 1_000_000
    text = pg.run("status", "local").out
    # the server's own version (15.18), asked over its protocol
    assert re.search(r"accessory db: postgres 15\.\d+ running \(healthy\) on 127\.0\.0\.1:", text)
    for out in outputs:
        assert secret not in out
    assert server_pid(pg) == pid


def test_the_server_listens_on_loopback_only(pg: Slot) -> None:
    pg.deploy()
    port = json.loads((accessory_dir(pg) / "credentials.json").read_text())["port"]
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    address = outward_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address")
    with pytest.raises(OSError), socket.create_connection((address, port), timeout=5):
        pass


def outward_address() -> str | None:
    """An address of this machine that is not loopback (the one its default route uses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") else address


def test_destroy_keeps_its_data_and_only_destroy_volumes_deletes_it(pg: Slot) -> None:
    pg.deploy()
    assert pg.get("/write?kept") == (200, "written\n")
    secret = password(pg)
    r = pg.run("destroy", "local", "--confirm", "local")
    assert r.code == 0, r.text
    assert "stopped accessory db" in r.out
    assert (accessory_dir(pg) / "data" / "PG_VERSION").is_file()
    pg.deploy()
    assert password(pg) == secret
    assert pg.get("/") == (200, "kept by r1\n")
    r = pg.run("destroy", "local", "--volumes", "--confirm", "local")
    assert r.code == 0, r.text
    assert not accessory_dir(pg).exists()
    assert secret not in r.text


def test_a_major_version_change_is_refused_and_names_what_is_not_done(pg: Slot) -> None:
    pg.deploy()
    pid = server_pid(pg)
    pg.edit_spec('version = "15"', 'version = "16"')
    for verb in ("plan", "deploy"):
        r = pg.run(verb, "local")
        assert r.code == 2, r.text
        assert "accessories.db.version" in r.err
        # the machine has no postgres 16, or the major version would change: both refused
        assert "16" in r.err
    assert server_pid(pg) == pid


def test_a_version_this_machine_lacks_is_refused_with_the_package_to_install(pg: Slot) -> None:
    missing = next(
        v for v in ("12", "13", "14", "16", "17") if not (pg_bin(v) / "postgres").exists()
    )
    pg.edit_spec('version = "15"', f'version = "{missing}"')
    r = pg.run("plan", "local")
    assert r.code == 2, r.text
    assert f"apt-get install postgresql-{missing}" in r.err
    assert "shipway.toml: accessories.db.version" in r.err
    assert not (pg.state / "hello").exists()


REDIS_SPEC = """
[app]
name = "hello"

[processes.web]
command = "python3 app.py"
port = 8000

[env]
EDITION = "1"

[accessories.cache]
kind = "redis"
version = "7"

[secrets]
REDIS_URL = { from_accessory = "cache" }
"""

#: a Redis client in a few lines (no client library): SET or GET one key through REDIS_URL
REDIS_CLIENT = r"""
import os, socket, sys, urllib.parse
url = urllib.parse.urlsplit(os.environ["REDIS_URL"])
def cmd(*words):
    out = b"*%d\r\n" % len(words)
    for w in words:
        w = w.encode()
        out += b"$%d\r\n%s\r\n" % (len(w), w)
    return out
with socket.create_connection((url.hostname, url.port)) as s:
    s.sendall(cmd("AUTH", urllib.parse.unquote(url.password)) + cmd(*sys.argv[1:]))
    got = b""
    while got.count(b"\r\n") < (3 if sys.argv[1] == "GET" else 2):
        got += s.recv(4096)
print(got.decode().split("\r\n")[1:][:2] if sys.argv[1] == "GET" else got.decode().split())
"""


def test_redis_beside_the_app_keeps_its_data_across_redeploys(slot: Slot) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    (slot.app_dir / "redis_client.py").write_text(REDIS_CLIENT)
    slot.spec.write_text(REDIS_SPEC)
    r = slot.deploy()
    assert "create accessory cache (redis 7)" in r.out
    pid = server_pid(slot, "cache")
    secret = password(slot, "cache")
    r = slot.run("run", "local", "--", "python3", "redis_client.py", "SET", "greeting", "kept")
    assert r.code == 0 and "+OK" in r.out, r.text
    next_edition(slot)
    r = slot.deploy()
    assert "accessory" not in r.out.split("(made from")[0]
    assert server_pid(slot, "cache") == pid
    r = slot.run("run", "local", "--", "python3", "redis_client.py", "GET", "greeting")
    assert r.code == 0 and "kept" in r.out, r.text
    (cache,) = slot.status()["accessories"]
    assert (cache["kind"], cache["version"], cache["healthy"]) == ("redis", "7", True)
    assert secret not in r.text + slot.run("status", "local", "-o", "json").text
    # the server asks for its password: without it, nothing
    port = json.loads((accessory_dir(slot, "cache") / "credentials.json").read_text())["port"]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"*2\r\n$3\r\nGET\r\n$8\r\ngreeting\r\n")
        assert sock.recv(256).startswith(b"-NOAUTH")
