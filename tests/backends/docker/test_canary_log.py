"""The canary's counts are read from the shared proxy's log from its end: every line after
the last read, and none before, however many more than the first look asks for (the
engine's ``since`` alone decodes the whole log at each read: bench/docker_canary_log.py)."""

from __future__ import annotations

import time

import docker
from docker.models.containers import Container

from shipway.backends.docker.canary import TAIL_FIRST, log_since
from tests.backends.local.conftest import eventually
from tests.testenv.docker import DockerEnv

BEFORE, AFTER = 300, 4 * TAIL_FIRST - 24  # the second look (4x) holds the after lines


def _printer(client: docker.DockerClient, env: DockerEnv, reap: list[Container]) -> Container:
    """A container that prints BEFORE lines, waits for /tmp/go, then prints AFTER lines."""
    script = (
        f"i=0; while [ $i -lt {BEFORE} ]; do echo before $i; i=$((i+1)); done; "
        "while [ ! -e /tmp/go ]; do sleep 0.05; done; "
        f"i=0; while [ $i -lt {AFTER} ]; do echo after $i; i=$((i+1)); done; sleep 600"
    )
    container = client.containers.run(env.images.v1, ["sh", "-c", script], detach=True)
    reap.append(container)
    return container


def test_every_line_after_since_is_read_from_the_end_and_none_before(
    docker_env: DockerEnv, docker_a: docker.DockerClient, docker_reap: list[Container]
) -> None:
    container = _printer(docker_a, docker_env, docker_reap)
    name = str(container.name)
    eventually(lambda: len(log_since(docker_a, name, 1)) == BEFORE, what="the before lines")
    since = time.time()  # after every before line was logged (the engine's clock is this one's)
    container.exec_run(["touch", "/tmp/go"])
    eventually(lambda: b"after %d" % (AFTER - 1) in b"".join(log_since(docker_a, name, since)),
               what="the after lines")  # fmt: skip
    rows = log_since(docker_a, name, since)
    texts = [row.partition(b" ")[2] for row in rows]
    assert texts == [b"after %d" % i for i in range(AFTER)]  # more than the first look's
    assert len(rows) > TAIL_FIRST
    assert log_since(docker_a, name, time.time() + 5) == []
