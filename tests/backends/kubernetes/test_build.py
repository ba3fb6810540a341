"""``deploy --build`` on a Kubernetes slot: the image is built on a Docker engine
(``DOCKER_HOST``: the test environment's host A), pushed to the test registry, and the
cluster gets the pushed DIGEST. kwok runs no image, so the pod templates are what is
asserted: by digest, never by the tag, from the first ReplicaSet on."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipway.backends.registry import lookup
from shipway.release.model import ImageMeta
from tests.backends.kubernetes.conftest import Slot
from tests.testenv.docker import DockerEnv

pytestmark = pytest.mark.k8s

SPEC = """
[app]
name = "clock"
image = "{image}"

[processes.web]
command = "python3 -m http.server 8000"
port = 8000

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"
"""

DOCKERFILE = """
FROM {base}
WORKDIR /srv/clock
COPY index.html .
EXPOSE 8000
CMD ["python3", "-m", "http.server", "8000"]
"""


@pytest.fixture
def repository(docker_env: DockerEnv) -> Iterator[str]:
    """A repository of the test's own in the test registry, its tags on the hosts removed
    after it."""
    name = f"clock-{uuid.uuid4().hex[:8]}"
    yield f"{docker_env.image_prefix}/{name}"
    docker_env.untag(name)


def test_deploy_build_applies_the_pushed_digest(
    slot: Slot, docker_env: DockerEnv, repository: str
) -> None:
    slot.write(SPEC, image=repository)
    (slot.directory / "Dockerfile").write_text(DOCKERFILE.format(base=docker_env.images.python))
    (slot.directory / "index.html").write_text("tick\n")
    env = {"DOCKER_HOST": docker_env.a.url}
    planned = slot.cli("plan", "test1", "--build", "-o", "json", env=env)
    assert planned.returncode == 0, planned.stderr
    step = json.loads(planned.stdout)["steps"][0]
    assert step["step"] == "build" and step["reuse"] is False
    assert step["what"].startswith(f"{repository}:src-")

    done = slot.cli("deploy", "test1", "--build", "-o", "json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["outcome"] == "rolled"
    assert "build | Step 1/" in done.stderr and "pushed " in done.stderr
    record = slot.records(slot.app())[1]
    assert record.build is not None and record.build.what == step["what"]
    digest = record.digest
    assert digest and digest == record.build.result
    assert lookup(step["what"], insecure=[docker_env.registry]).digest == digest
    assert record.image_meta is not None
    assert record.image_meta == ImageMeta("dockerfile", "/srv/clock", 8000)
    # the cluster runs the digest (the tag beside it is informative; a digest wins): the
    # template, and every ReplicaSet it ever had
    pinned = f"{step['what']}@{digest}"
    assert slot.images() == {"clock-web": pinned}
    for rs in slot.replicasets("clock-web").values():
        assert rs.spec.template.spec.containers[0].image == pinned

    # unchanged source: nothing is built; "no changes", the same digest stays
    again = slot.cli("deploy", "test1", "--build", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "no changes" in again.stdout and "build |" not in again.stdout
    forced = slot.cli("deploy", "test1", "--build", "--force", env=env)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "reuse image" in forced.stdout and "build |" not in forced.stdout
    assert slot.records(slot.app())[2].digest == digest


def test_build_refuses_an_app_without_a_dockerfile(slot: Slot, docker_env: DockerEnv) -> None:
    slot.write(SPEC, image=f"{docker_env.image_prefix}/clock-none")
    refused = slot.cli("build", "test1", env={"DOCKER_HOST": docker_env.a.url})
    assert refused.returncode == 2
    assert "build.dockerfile 'Dockerfile': no such file" in refused.stderr
    assert not Path(slot.directory / "Dockerfile").exists()
