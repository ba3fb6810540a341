"""A host another app's proxy serves on the slot's Docker hosts is refused, naming the
owner and where it answers, unless the deploy is told to take it (--take-host)."""

from __future__ import annotations

import http.client
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.docker.conftest import Deployment, free_port
from tests.backends.docker.test_interrupt import cli, finish
from tests.testenv.docker import DockerEnv


def get(d: Deployment, host: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection(d.env.a.address, d.port, timeout=5)
    try:
        conn.request("GET", "/version", headers={"Host": host})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


ROUTE = '[[routes]]\nhost = "{host}"\nprocess = "web"\n'


@pytest.fixture
def blog(docker_env: DockerEnv, ssh_env: dict[str, str], tmp_path: Path) -> Iterator[Deployment]:
    """Another app on the same Docker hosts."""
    directory = tmp_path / "blog"
    directory.mkdir()
    d = Deployment(env=docker_env, name=f"b{uuid.uuid4().hex[:8]}", dir=directory, port=free_port())
    try:
        yield d
    finally:
        d.cleanup()


def test_a_host_another_app_s_proxy_serves_is_refused_unless_taken(
    deployment: Deployment, blog: Deployment
) -> None:
    env = deployment.env
    host = f"{deployment.name}.example.test"
    blog.write(hosts=[env.a], extra=ROUTE.format(host=host))
    code, out = finish(cli(blog, "deploy", "test"))
    assert code == 0, out

    deployment.write(hosts=[env.a], extra=ROUTE.format(host=host))
    code, out = finish(cli(deployment, "deploy", "test"))
    assert code == 2, out
    owner = f"{blog.name}/test (proxy shipway-proxy-{blog.port} on docker-a, port {blog.port})"
    assert f"host {host} is served by {owner}; refusing to take it" in out, out
    assert "--take-host" in out
    assert deployment.containers(env.a) == []  # nothing was made

    code, out = finish(cli(deployment, "deploy", "test", "--take-host"))
    assert code == 0, out
    assert f"taking host {host} from {owner} (--take-host)" in out
    assert get(deployment, host) == (200, "v1\n")
    # a host this slot serves itself is not "taken" again
    code, out = finish(cli(deployment, "deploy", "test"))
    assert code == 0 and "taking host" not in out, out
