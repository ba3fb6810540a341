"""A second Postgres major for the upgrade tests, as an image in the test registry.

Debian bookworm has PostgreSQL 15 only (the test environment's ``postgres:15``); the one
Postgres 16 this machine has is the pgserver wheel's (16.2, in the test extras; the local
upgrade tests run it too). ``postgres:16`` is built FROM the test ``postgres:15`` (its
entrypoint, user and libraries) with that installation copied in and put first on PATH:
the same entrypoint then runs a real 16.2 ``initdb``, server, ``pg_dump`` and
``pg_restore``. Built on host A through the Engine API and pushed, so host B and the
Kubernetes real node pull it; made once (a file lock across test workers).

A failing upgrade needs a "new" server that is not what was asked for: the mirror
``<registry>/shipway-test-fake16`` holds ``postgres:15`` (the real one) and ``postgres:16``
(the same 15 image under the other tag): an upgrade to it finds a 15 server and fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import io
import os
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

DOCKERFILE = """FROM {base}
COPY pgserver/ /opt/pg16/pgserver/
COPY pgserver.libs/ /opt/pg16/pgserver.libs/
ENV PATH=/opt/pg16/pgserver/pginstall/bin:/usr/local/sbin:/usr/local/bin:\
/usr/sbin:/usr/bin:/sbin:/bin
LABEL org.shipway.testenv.postgres=16.2-pgserver
"""


def pgserver_install() -> Path | None:
    """The pgserver wheel's site-packages directory (its ``pgserver/pginstall`` and
    ``pgserver.libs``), or None."""
    found = importlib.util.find_spec("pgserver")
    for where in (found.submodule_search_locations or []) if found else []:
        if (Path(where) / "pginstall" / "bin" / "postgres").is_file():
            return Path(where).parent
    return None


def _context(site: Path, base: str) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = DOCKERFILE.format(base=base).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for d in ("pgserver/pginstall", "pgserver.libs"):
            tar.add(site / d, arcname=d)
    buf.seek(0)
    return buf


def push(client: docker.DockerClient, ref: str) -> None:
    repo, tag = ref.rsplit(":", 1)
    for chunk in client.api.push(repo, tag=tag, stream=True, decode=True):
        if isinstance(chunk, dict) and "error" in chunk:
            raise RuntimeError(f"push {ref}: {chunk['error']}")


def built(client: docker.DockerClient, ref: str, context: Callable[[], io.BytesIO]) -> None:
    """``ref`` built from ``context()`` unless the engine has it, then pushed (a new
    machine's registry holds nothing yet)."""
    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        client.images.build(fileobj=context(), custom_context=True, tag=ref, rm=True)
    push(client, ref)


@contextlib.contextmanager
def image_maker(lock_name: str) -> Iterator[tuple[docker.DockerClient, str, str]]:
    """(host A's client, the image prefix, the registry), held under a file lock across
    test workers (what one makes, the others find made)."""
    prefix = os.environ.get("SHIPWAY_TEST_IMAGE_PREFIX")
    registry = os.environ.get("SHIPWAY_TEST_REGISTRY")
    engine = os.environ.get("SHIPWAY_TEST_DOCKER_A")
    if not (prefix and registry and engine):
        pytest.fail("the Docker test environment is not set: eval scripts/docker-testenv env")
    lock = Path(os.environ.get("TMPDIR", "/tmp")) / lock_name
    client = docker.DockerClient(base_url=engine, timeout=600)
    try:
        with open(lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            yield client, prefix, registry
    finally:
        client.close()


def postgres_images() -> tuple[str, str]:
    """(the mirror holding a real ``postgres:15`` and ``postgres:16``, the mirror whose
    ``postgres:16`` is a 15): built and pushed once; skips when pgserver is missing."""
    site = pgserver_install()
    if site is None:
        pytest.skip("no postgres 16 on this machine (the pgserver wheel ships one)")
    with image_maker("shipway-test-postgres-16.lock") as (client, prefix, registry):
        fake = f"{registry}/shipway-test-fake16"
        base = f"{prefix}/postgres:15"
        client.images.get(base)
        built(client, f"{prefix}/postgres:16", lambda: _context(site, base))
        image = client.images.get(base)
        for tag in ("15", "16"):
            image.tag(f"{fake}/postgres", tag)
            push(client, f"{fake}/postgres:{tag}")
    return prefix, fake
