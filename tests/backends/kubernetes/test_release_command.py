"""The release command runs once as a Job, before anything switches."""

from __future__ import annotations

import pytest
from lightkube.resources.batch_v1 import Job

from shipway.engine.outcome import Rolled, RolledBack
from tests.backends.kubernetes.conftest import Slot

pytestmark = pytest.mark.k8s


def test_the_release_command_runs_before_the_workloads_switch(slot: Slot) -> None:
    slot.write()
    app = slot.edit(
        'image_type = "dockerfile"', 'image_type = "dockerfile"\nrelease_command = "migrate --yes"'
    )
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    order = [line for line in lines.lines if line.startswith("[")]
    command = next(i for i, line in enumerate(order) if "release command" in line)
    first_switch = next(i for i, line in enumerate(order) if "Deployment/" in line)
    assert command < first_switch
    job = slot.client.get(Job, "shop-release-r1", namespace=slot.namespace)
    assert job.status.succeeded == 1
    container = job.spec.template.spec.containers[0]
    assert container.args == ["migrate", "--yes"]
    assert container.image == "registry.example/shop:1"
    assert container.envFrom[0].secretRef.name == "shop-env"


def test_a_failing_release_command_switches_nothing(slot: Slot) -> None:
    slot.write()
    app = slot.edit(
        'image_type = "dockerfile"', 'image_type = "dockerfile"\nrelease_command = "migrate"'
    )
    slot.deploy(app)
    outcome, lines = slot.deploy(app, image="registry.example/shop:crashloop")
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason == "ReleaseCommandFailed"
    assert outcome.failure.exit_code == 1
    assert slot.images()["shop-web"] == "registry.example/shop:1"
    assert not any("update Deployment/" in line for line in lines.lines if line.startswith("["))
