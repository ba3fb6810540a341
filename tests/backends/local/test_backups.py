"""Backups of accessories on this machine, restored for real: a Postgres (Debian's
postgresql-15) dumped by its own major version's pg_dump and restored into a fresh app's
slot, where the rows are found (by the app, and by ``shipway run``); a Redis snapshot
likewise; a corrupted file refused with nothing touched; a missing pg_dump of the server's
major refused, never replaced by another's; a major-version upgrade refused unless asked,
and a failed one leaving the old data running. Real processes, real servers, the real CLI."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from shipway.backends.local.servers import pg_bin
from tests.backends.local import test_accessories as accessories
from tests.backends.local.conftest import Slot, eventually
from tests.backends.local.test_accessories import (
    REDIS_CLIENT,
    REDIS_SPEC,
    accessory_dir,
    password,
    server_pid,
)

pytestmark = pytest.mark.skipif(
    not (pg_bin("15") / "postgres").is_file(), reason="postgresql-15 is not installed"
)

PG15 = pg_bin("15").parent
COUNT = (
    "import os, psycopg; u = os.environ['DATABASE_URL']; "
    "print('rows', psycopg.connect(u).execute('select count(*) from notes').fetchone()[0])"
)


#: the slot of test_accessories: the hello app writing rows to its Postgres accessory
pg = accessories.pg


def another_app(slot: Slot, name: str = "other") -> Path:
    """A copy of the slot's app named ``name`` (its own slot, accessory and database), beside
    it; its spec file."""
    copy = slot.app_dir.parent / name
    shutil.copytree(slot.app_dir, copy)
    spec = copy / "shipway.toml"
    spec.write_text(spec.read_text().replace('name = "hello"', f'name = "{name}"'))
    return spec


def backed_up(slot: Slot, name: str, out: Path, spec: Path | None = None) -> dict[str, object]:
    r = slot.run("backup", "local", name, "--out", str(out), "-o", "json", spec=spec)
    assert r.code == 0, r.text
    doc: dict[str, object] = json.loads(r.out)
    return doc


def test_a_postgres_backup_restores_into_a_fresh_slot_with_its_rows(
    pg: Slot, tmp_path: Path
) -> None:
    pg.deploy()
    for word in ("one", "two"):
        assert pg.get(f"/write?{word}") == (200, "written\n")
    out = tmp_path / "backups"
    out.mkdir()
    doc = backed_up(pg, "db", out)
    path = Path(str(doc["path"]))
    assert path.parent == out and path.name.startswith("hello-local-db-")
    assert path.read_bytes().startswith(b"PGDMP")  # pg_dump's custom format
    assert str(doc["server_version"]).startswith("15.")
    assert doc["made_by"] == str(pg_bin("15") / "pg_dump")  # the server's own major
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert doc["sha256"] == digest and doc["bytes"] == path.stat().st_size
    sidecar = Path(str(doc["checksum_file"]))
    assert sidecar.read_text() == f"{digest}  {path.name}\n"
    check = subprocess.run(["sha256sum", "-c", sidecar.name], cwd=out, capture_output=True)
    assert check.returncode == 0, check
    assert path.stat().st_mode & 0o777 == 0o600
    text = pg.run("backup", "local", "db", "--out", str(out))
    assert text.code == 0 and "backed up accessory db (postgres 15." in text.out, text.text

    # a fresh app in a slot of its own: migrated, no rows
    other = another_app(pg)
    pg.deploy(spec=other)
    assert pg.get("/", host="other.localhost") == (200, "(none)\n")
    # a restore replaces data: it needs the slot's name typed back, on every slot
    r = pg.run("restore", "local", "db", str(path), spec=other)
    assert r.code == 3 and "--confirm local" in r.err, r.text
    r = pg.run("restore", "local", "db", str(path), "--confirm", "local", spec=other)
    assert r.code == 0, r.text
    assert "sha256 matches" in r.out and "database other replaced" in r.out
    # the app finds the rows (its connections were cut by the swap: a fresh one each time)
    assert eventually(
        lambda: pg.get("/", host="other.localhost") == (200, "one by r1\ntwo by r1\n"),
        what="the restored rows",
    )
    # and a one-off command reaches the accessory through its link
    r = pg.run("run", "local", "--", "python3", "-c", COUNT, spec=other)
    assert r.code == 0 and "rows 2" in r.out, r.text
    secrets = (password(pg), password(pg, app="other"))
    assert not any(s in r.text + text.text + json.dumps(doc) for s in secrets)


def test_a_corrupted_backup_is_refused_and_nothing_is_touched(pg: Slot, tmp_path: Path) -> None:
    pg.deploy()
    assert pg.get("/write?kept") == (200, "written\n")
    doc = backed_up(pg, "db", tmp_path)
    path = Path(str(doc["path"]))
    bad = tmp_path / "bad.dump"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    (tmp_path / "bad.dump.sha256").write_text(f"{doc['sha256']}  bad.dump\n")
    assert pg.get("/write?after") == (200, "written\n")
    pid = server_pid(pg)
    r = pg.run("restore", "local", "db", str(bad), "--confirm", "local")
    assert r.code == 2, r.text
    assert "corrupted" in r.err and "nothing was restored" in r.err
    # without its checksum file, a file is not trusted either
    (tmp_path / "bad.dump.sha256").unlink()
    r = pg.run("restore", "local", "db", str(bad), "--confirm", "local")
    assert r.code == 2 and "checksum file bad.dump.sha256 is missing" in r.err, r.text
    assert pg.get("/") == (200, "kept by r1\nafter by r1\n")
    assert server_pid(pg) == pid
    # a backup never overwrites a file
    r = pg.run("backup", "local", "db", "--out", str(path))
    assert r.code == 2 and "never overwrites" in r.err, r.text


def pg_root(tmp_path: Path, majors: dict[str, Path], without: tuple[str, ...] = ()) -> Path:
    """A directory laid out as /usr/lib/postgresql (``SHIPWAY_POSTGRES_ROOT``): each major a
    copy of links to a real installation's programs, less those named in ``without``."""
    root = tmp_path / "pgroot"
    for major, real in majors.items():
        (root / major / "bin").mkdir(parents=True)
        (root / major / "lib").symlink_to(real / "lib")
        for program in (real / "bin").iterdir():
            if program.name not in without:
                (root / major / "bin" / program.name).symlink_to(program)
    return root


def test_a_missing_pg_dump_of_the_servers_major_is_refused_never_replaced(
    pg: Slot, tmp_path: Path
) -> None:
    pg.env["SHIPWAY_POSTGRES_ROOT"] = str(pg_root(tmp_path, {"15": PG15}, without=("pg_dump",)))
    pg.deploy()
    out = tmp_path / "out"
    out.mkdir()
    r = pg.run("backup", "local", "db", "--out", str(out))
    assert r.code == 2, r.text
    assert "pg_dump of postgres 15 (the server's own major version) is not installed" in r.err
    assert "never used in its place" in r.err and "postgresql-client-15" in r.err
    assert list(out.iterdir()) == []


def test_a_major_upgrade_is_refused_unless_asked_and_a_failed_one_keeps_the_old_data(
    pg: Slot, tmp_path: Path
) -> None:
    # "16" is postgres 15's programs under another name: its initdb makes a 15 cluster, so
    # the upgrade goes as far as the new cluster and fails there, as a broken new server would
    pg.env["SHIPWAY_POSTGRES_ROOT"] = str(pg_root(tmp_path, {"15": PG15, "16": PG15}))
    pg.deploy()
    assert pg.get("/write?precious") == (200, "written\n")
    pid = server_pid(pg)
    pg.edit_spec('version = "15"', 'version = "16"')
    for verb in ("plan", "deploy"):
        r = pg.run(verb, "local")
        assert r.code == 2, r.text
        assert "accessories.db.version" in r.err and "--upgrade-accessory db" in r.err
    assert server_pid(pg) == pid
    r = pg.run("plan", "local", "--upgrade-accessory", "db")
    assert r.code == 0, r.text
    assert "upgrade accessory db (postgres 16): 15 -> 16, asked by --upgrade-accessory db" in r.out
    r = pg.run("deploy", "local", "--upgrade-accessory", "db")
    assert r.code == 10, r.text  # rolled back: the app's r1 serves again
    assert "the upgrade of accessory db to postgres 16 failed" in r.text
    assert "postgres 15 runs again on its data" in r.text
    here = accessory_dir(pg)
    assert (here / "data" / "PG_VERSION").read_text().strip() == "15"
    assert not (here / "data.15").exists()
    assert len(list(here.glob("data.16.failed.*"))) == 1
    assert (here / "upgrade-15-to-16.dump").read_bytes().startswith(b"PGDMP")
    assert (here / "upgrade-15-to-16.dump.sha256").is_file()
    assert pg.get("/") == (200, "precious by r1\n")
    (db,) = pg.status()["accessories"]
    assert (db["version"], db["healthy"]) == ("15", True)


def postgres_16() -> Path | None:
    """A second major version: Postgres 16.2 as the pgserver wheel ships it (Debian
    bookworm has no postgresql-16), or None."""
    found = importlib.util.find_spec("pgserver")
    for where in (found.submodule_search_locations or []) if found else []:
        install = Path(where) / "pginstall"
        if (install / "bin" / "postgres").is_file():
            return install
    return None


def test_a_major_upgrade_asked_for_is_a_dump_and_restore_into_the_new_server(
    pg: Slot, tmp_path: Path
) -> None:
    pg16 = postgres_16()
    if pg16 is None:
        pytest.skip("no postgres 16 on this machine (the pgserver wheel ships one)")
    root = pg_root(tmp_path, {"15": PG15, "16": pg16})
    pg.env["SHIPWAY_POSTGRES_ROOT"] = str(root)
    pg.deploy()
    for word in ("one", "two"):
        assert pg.get(f"/write?{word}") == (200, "written\n")
    (db,) = pg.status()["accessories"]
    assert db["server_version"].startswith("15.")
    pg.edit_spec('version = "15"', 'version = "16"')
    r = pg.run("deploy", "local", "--upgrade-accessory", "db")
    assert r.code == 0, r.text
    assert "upgrade accessory db (postgres 16): 15 -> 16" in r.out
    assert "pg_dump of postgres 15" in r.out
    assert "postgres 16 answers with the data restored; data.15 deleted" in r.out
    (db,) = pg.status()["accessories"]
    assert (db["version"], db["server_version"], db["healthy"]) == ("16", "16.2", True)
    here = accessory_dir(pg)
    assert (here / "data" / "PG_VERSION").read_text().strip() == "16"
    assert not (here / "data.15").exists()
    assert (here / "upgrade-15-to-16.dump.sha256").is_file()
    assert eventually(
        lambda: pg.get("/") == (200, "one by r1\ntwo by r1\n"), what="the rows on postgres 16"
    )
    # a backup is now made by 16's own pg_dump
    doc = backed_up(pg, "db", tmp_path)
    assert doc["made_by"] == str(root / "16" / "bin" / "pg_dump")
    assert str(doc["server_version"]) == "16.2"
    r = pg.deploy()
    assert "no changes" in r.out and "accessory" not in r.out.split("(made from")[0]


def test_a_stopped_accessory_is_started_by_a_deploy_that_is_otherwise_no_changes(
    pg: Slot,
) -> None:
    pg.deploy()
    pg.supervisor().stop("acc.hello.local.db")
    r = pg.run("plan", "local")
    assert r.code == 0, r.text
    lines = r.out.splitlines()
    assert lines[0] == "deploy hello to slot local (local): no changes to the app"
    assert lines[1].startswith("  1. start accessory db (postgres 15): it is not running")
    r = pg.deploy()
    assert "no changes: hello/local already runs what this deploy would run (r1)" in r.out
    assert "started accessory db (it was not running)" in r.out
    assert [rel["revision"] for rel in pg.history()] == [1]
    pid = server_pid(pg)
    assert pg.get("/write?back") == (200, "written\n")
    r = pg.deploy()
    assert "no changes" in r.out and "started accessory" not in r.out
    assert server_pid(pg) == pid


def test_status_shows_each_servers_own_version_health_and_size(pg: Slot) -> None:
    pg.deploy()
    (db,) = pg.status()["accessories"]
    assert db["version"] == "15" and db["server_version"].startswith("15.")
    assert db["healthy"] is True and db["data_bytes"] > 1_000_000
    text = pg.run("status", "local").out
    assert f"accessory db: postgres {db['server_version']} running (healthy)" in text
    assert "data " in text.split("accessory db:")[1]


def redis_slot(slot: Slot) -> Slot:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    (slot.app_dir / "redis_client.py").write_text(REDIS_CLIENT)
    slot.spec.write_text(REDIS_SPEC)
    return slot


def redis(slot: Slot, *words: str, spec: Path | None = None) -> str:
    r = slot.run("run", "local", "--", "python3", "redis_client.py", *words, spec=spec)
    assert r.code == 0, r.text
    return r.out


def test_a_redis_snapshot_restores_into_a_fresh_slot_with_its_keys(
    slot: Slot, tmp_path: Path
) -> None:
    redis_slot(slot)
    slot.deploy()
    assert "+OK" in redis(slot, "SET", "greeting", "kept")
    assert "+OK" in redis(slot, "SET", "answer", "42")
    doc = backed_up(slot, "cache", tmp_path)
    path = Path(str(doc["path"]))
    assert path.read_bytes().startswith(b"REDIS")
    assert str(doc["server_version"]).startswith("7.") and doc["made_by"] == "BGSAVE"
    assert Path(str(doc["checksum_file"])).read_text().startswith(str(doc["sha256"]))

    other = another_app(slot)
    slot.deploy(spec=other)
    assert "+OK" in redis(slot, "SET", "greeting", "replaced", spec=other)
    assert "replaced" in redis(slot, "GET", "greeting", spec=other)
    r = slot.run("restore", "local", "cache", str(path), "--confirm", "local", spec=other)
    assert r.code == 0, r.text
    assert "its whole data set replaced" in r.out
    assert "kept" in redis(slot, "GET", "greeting", spec=other)
    assert "42" in redis(slot, "GET", "answer", spec=other)
    # what was restored is what the server keeps: its append-only file is on and rewritten
    here = accessory_dir(slot, "cache", "other")
    assert "appendonly yes" in (here / "redis.conf").read_text()
    assert not (here / "data.before-restore").exists()
    slot.supervisor().stop("acc.other.local.cache")
    slot.deploy(spec=other)  # starts it again: "no changes" to the app
    assert "kept" in redis(slot, "GET", "greeting", spec=other)
    for secret in (password(slot, "cache"), password(slot, "cache", "other")):
        assert secret not in r.text + json.dumps(doc)
