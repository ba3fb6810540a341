"""A Postgres accessory's major-version upgrade on a Docker host, for real, through the real
CLI: refused without ``--upgrade-accessory`` (exit 2, naming the flag, the container as it
was); done with it as a dump and restore from a real 15 into a real 16.2 (the rows there
after, the server saying 16); and an upgrade to a "16" that is a 15 in disguise failing
after the new server answered, leaving the very same old container serving its old rows.

Images: tests/testenv/pg_images.py (the test ``postgres:15`` and, FROM it, ``postgres:16``
with the pgserver wheel's 16.2; Debian bookworm has no second major)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.backends.docker.conftest import SLOT, Deployment, names_in
from tests.backends.docker.test_accessories import accessory, write
from tests.backends.docker.test_backups import deployed, psql, shipway
from tests.testenv.pg_images import postgres_images

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def images() -> tuple[str, str]:
    return postgres_images()


def with_rows(d: Deployment, mirror: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The slot deployed with postgres 15 from ``mirror``, a table of two rows in it, and
    the spec then asking for 16; the accessory's password."""
    monkeypatch.setenv("SHIPWAY_ACCESSORY_MIRROR", mirror)
    write(d)
    password = deployed(d)
    psql(d, password, "create table notes (id serial primary key, text text)")
    psql(d, password, "insert into notes (text) values ('one'), ('two')")
    assert psql(d, password, "show server_version").startswith("15.")
    write(d, version="16")
    return password


def refused_unasked(d: Deployment) -> Any:
    """``plan`` and ``deploy`` without ``--upgrade-accessory`` refused (exit 2, naming the
    key and the flag), the accessory's container the very same, not restarted; it."""
    before = accessory(d)
    for verb in ("plan", "deploy"):
        r = shipway(d, verb, SLOT)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "accessories.db.version" in r.stderr and "--upgrade-accessory db" in r.stderr
    after = accessory(d)
    assert (after.id, after.attrs["State"]["StartedAt"]) == (
        before.id,
        before.attrs["State"]["StartedAt"],
    )
    return before


def test_an_upgrade_is_refused_unless_asked_and_then_is_a_dump_and_restore(
    deployment: Deployment, images: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment
    password = with_rows(d, images[0], monkeypatch)
    before = refused_unasked(d)
    r = shipway(d, "plan", SLOT, "--upgrade-accessory", "db")
    assert r.returncode == 0, r.stderr
    assert "upgrade accessory db (postgres 16): 15 -> 16, asked by --upgrade-accessory db" in (
        r.stdout
    )
    r = shipway(d, "deploy", SLOT, "--upgrade-accessory", "db")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pg_dump 15." in r.stdout and "postgres 16 answers with the data restored" in r.stdout
    assert psql(d, password, "show server_version") == "16.2"
    assert psql(d, password, "select text from notes order by id") == "one\ntwo"
    new = accessory(d)
    assert new.id != before.id
    client = d.local(d.env.a)
    try:
        listed = client.api.containers(all=True)  # one call: see test_redis_upgrade
        left = [n for c in listed for n in c["Names"] if n.endswith("-pg15")]
    finally:
        client.close()
    assert left == []
    # the old cluster's files are gone from the volume; the new one and the dump are there
    listed = names_in(new, "/var/lib/postgresql/data")
    assert sorted(listed) == ["pg16", "shipway-upgrade-15-to-16.dump"], listed
    # the next deploy has nothing to do for it, and a restart keeps its cluster's directory
    r = shipway(d, "deploy", SLOT)
    assert r.returncode == 0 and "accessory" not in r.stdout.split("(made from")[0], r.stdout
    assert accessory(d).id == new.id
    assert password not in r.stdout + r.stderr
    # destroyed (its container gone, its volume kept) and deployed again: the new container
    # is made on the cluster the upgrade left in pg16/, not on an empty root
    r = shipway(d, "destroy", SLOT, "--confirm", SLOT)
    assert r.returncode == 0, r.stderr
    assert deployed(d) == password
    assert psql(d, password, "show server_version") == "16.2"
    assert psql(d, password, "select text from notes order by id") == "one\ntwo"


def test_a_failed_upgrade_leaves_the_old_server_serving_its_old_rows(
    deployment: Deployment, images: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment
    password = with_rows(d, images[1], monkeypatch)  # its "16" is a 15
    before = accessory(d)
    r = shipway(d, "deploy", SLOT, "--upgrade-accessory", "db")
    assert r.returncode != 0, r.stdout + r.stderr
    text = r.stdout + r.stderr
    assert "the upgrade of accessory db to postgres 16 failed" in text, text
    assert "the new server is postgres 15." in text and "postgres 15 runs again" in text, text
    again = accessory(d)
    assert again.id == before.id and again.status == "running"
    assert psql(d, password, "show server_version").startswith("15.")
    assert psql(d, password, "select text from notes order by id") == "one\ntwo"
    listed = names_in(again, "/var/lib/postgresql/data")
    assert "PG_VERSION" in listed and "pg16" not in listed, listed
    assert "shipway-upgrade-15-to-16.dump" in listed
    assert password not in text
