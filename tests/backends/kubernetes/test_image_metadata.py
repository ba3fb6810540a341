"""Image metadata for Kubernetes slots: inspected through a real Docker engine (the test
environment's host A), recorded, and used from the record once the image is gone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import docker
import pytest

from tests.backends.kubernetes.conftest import Slot
from tests.testenv.docker import DockerEnv

pytestmark = pytest.mark.k8s

SPEC = """
[app]
name = "hello"
image = "{image}"

[processes.web]
port = 5000

[processes.clock]
command = "bin/clock --every 60"

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"
"""


@pytest.fixture
def engine_a(
    docker_env: DockerEnv, monkeypatch: pytest.MonkeyPatch
) -> Iterator[docker.DockerClient]:
    """Host A as the Docker engine shipway inspects images in (``DOCKER_HOST``)."""
    monkeypatch.setenv("DOCKER_HOST", docker_env.a.url)
    client = docker_env.local_client(docker_env.a)
    yield client
    client.close()


def container(slot: Slot, name: str) -> tuple[list[str] | None, list[str] | None]:
    c = slot.deployment(name).spec.template.spec.containers[0]
    return c.command, c.args


def test_a_herokuish_app_keeps_its_start_wrapper_after_its_image_is_gone(
    slot: Slot, docker_env: DockerEnv, engine_a: docker.DockerClient
) -> None:
    tag = f"shipway-k8s-test/herokuish:{uuid.uuid4().hex[:8]}"
    assert engine_a.images.get(docker_env.images.herokuish).tag(tag)
    try:
        app = slot.write(SPEC.replace("{image}", tag))
        env = {"DOCKER_HOST": docker_env.a.url}
        first = slot.cli("deploy", "test1", env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        assert container(slot, "hello-web") == (["/start"], ["web"])
        assert container(slot, "hello-clock") == (["/exec"], ["bin/clock", "--every", "60"])
        recorded = slot.records(app)[1].image_meta
        assert recorded is not None
        assert (recorded.source_type, recorded.working_dir) == ("herokuish", "/app")
    finally:
        engine_a.images.remove(tag)  # the host reaped the image

    # Nothing can inspect it now: the restart takes the type from the deployed record.
    before = slot.deployment("hello-web").spec.template.metadata.annotations
    restarted = slot.cli("restart", "test1", "web", env=env)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert container(slot, "hello-web") == (["/start"], ["web"])
    after = slot.deployment("hello-web").spec.template.metadata.annotations
    assert after["shipway.io/deployment-id"] != before["shipway.io/deployment-id"]
    meta = slot.records(app)[2].image_meta
    assert meta is not None and meta.source_type == "herokuish"

    # A new image nobody can inspect, never recorded, no declared type: a clear error.
    unknown = slot.cli("deploy", "test1", "--image", f"{tag}-gone", env=env)
    assert unknown.returncode == 2
    assert "cannot tell what kind of image" in unknown.stderr


def test_a_buildpacks_image_runs_through_its_launcher_pinned_to_its_digest(
    slot: Slot, docker_env: DockerEnv, engine_a: docker.DockerClient
) -> None:
    ref = docker_env.images.cnb
    digests = engine_a.images.get(ref).attrs["RepoDigests"]
    digest = digests[0].split("@", 1)[1]
    app = slot.write(SPEC.replace("{image}", ref))
    result = slot.cli("deploy", "test1", env={"DOCKER_HOST": docker_env.a.url})
    assert result.returncode == 0, result.stdout + result.stderr
    assert container(slot, "hello-web") == (["/cnb/process/web"], None)
    assert container(slot, "hello-clock") == (
        ["/cnb/lifecycle/launcher"],
        ["bin/clock", "--every", "60"],
    )
    live = slot.deployment("hello-web").spec.template.spec.containers[0].image
    assert live == f"{ref}@{digest}"
    record = slot.records(app)[1]
    assert record.digest == digest
    assert record.image_meta is not None and record.image_meta.source_type == "pack"
