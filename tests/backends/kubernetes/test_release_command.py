"""The release command runs once as a Job, before anything switches; one that hangs is
stopped at its timeout and its Job deleted; one whose pod can never run fails with the
reason, at once or after its window; one a killed deploy left running is deleted by the
next deploy before it starts its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod
from lightkube.resources.storage_v1 import StorageClass

from shipway.engine.outcome import NoAnchor, Rolled, RolledBack
from tests.backends.kubernetes.conftest import Slot
from tests.testenv.k8s import wait_for, wait_for_all

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


RELEASE = 'image_type = "dockerfile"\nrelease_command = "migrate"\nrelease_timeout = "{timeout}"'


def release_jobs(slot: Slot) -> dict[str, Any]:
    return {j.metadata.name: j for j in slot.client.list(Job, namespace=slot.namespace)}


def test_a_hanging_release_command_is_stopped_at_its_timeout_and_its_job_deleted(
    slot: Slot,
) -> None:
    slot.write()
    app = slot.edit('image_type = "dockerfile"', RELEASE.format(timeout="1m"))
    outcome, lines = slot.deploy(app)  # r1 (its Job completes)
    assert isinstance(outcome, Rolled), lines.text
    app = slot.edit('release_timeout = "1m"', 'release_timeout = "3s"')
    # the release command's pod of this image runs and never finishes
    outcome, lines = slot.deploy(app, image="registry.example/shop:neverready")
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason == "ReleaseCommandTimeout"
    assert "release_timeout (3s)" in outcome.failure.message
    assert "Job shop-release-r2 deleted (stopped: it did not finish in time)" in lines.text
    wait_for_all(
        slot.client,
        Pod,
        lambda pods: not pods,
        namespace=slot.namespace,
        labels={"job-name": "shop-release-r2"},
        timeout=30,
        what="the release command's pod to go",
    )
    assert "shop-release-r2" not in release_jobs(slot)
    assert slot.images()["shop-web"] == "registry.example/shop:1"


def test_a_release_command_job_left_by_a_killed_deploy_is_deleted_by_the_next(
    slot: Slot,
) -> None:
    slot.write()
    app = slot.edit('image_type = "dockerfile"', RELEASE.format(timeout="10m"))
    slot.deploy(app)
    proc = slot.start_deploy("registry.example/shop:neverready")
    try:
        job = wait_for(
            slot.client,
            Job,
            "shop-release-r2",
            lambda j: bool(j.status and j.status.active),
            namespace=slot.namespace,
            timeout=60,
        )
        proc.kill()  # SIGKILL: nothing of shipway stops the Job
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    # the cluster would stop it by itself at the deadline shipway gave it ...
    assert 0 < job.spec.activeDeadlineSeconds <= 600
    # ... and the next deploy deletes it before it runs its own
    result = slot.cli("deploy", "test1", "--image", "registry.example/shop:3")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "Job shop-release-r2 deleted (left unfinished by an earlier run, killed)" in out
    assert "shop-release-r2" not in release_jobs(slot)
    assert release_jobs(slot)["shop-release-r3"].status.succeeded == 1


@pytest.fixture
def unbindable_class(k8s_client: Client, k8s_namespace: str) -> Iterator[str]:
    """A storage class of the test's own that binds at once (Immediate) and has neither a
    provisioner nor a volume: a claim of it stays unbound, and a pod mounting it can never
    be scheduled."""
    name = f"unbound-{k8s_namespace}"[:63]
    k8s_client.create(
        StorageClass(
            metadata=ObjectMeta(name=name),
            provisioner="kubernetes.io/no-provisioner",
            volumeBindingMode="Immediate",
        )
    )
    yield name
    k8s_client.delete(StorageClass, name)


def test_a_release_command_whose_pod_cannot_be_scheduled_fails_with_the_reason(
    slot: Slot, unbindable_class: str
) -> None:
    """Its pod mounts a claim that is never bound: judged as a Deployment's pods are, it is
    Unschedulable after its window, with the scheduler's reason — not a timeout at the end
    of release_timeout — and its Job is deleted."""
    slot.write()
    app = slot.edit('image_type = "dockerfile"', RELEASE.format(timeout="1m"))
    app = slot.append(
        f'[volumes.data]\npath = "/data"\nprocesses = ["web"]\n'
        f'storage_class = "{unbindable_class}"\n'
    )
    started = time.monotonic()
    outcome, lines = slot.deploy(app, tuning={"unschedulable_window": 3.0})
    took = time.monotonic() - started
    assert isinstance(outcome, NoAnchor | RolledBack), lines.text
    failure = outcome.failure
    assert failure.reason == "Unschedulable", failure
    assert "the release command (Job shop-release-r1) cannot run: pod shop-release-r1-" in (
        failure.message
    )
    assert "unbound" in failure.message and "PersistentVolumeClaim" in failure.message
    assert 3.0 <= took < 45, took  # not at the end of release_timeout (1m)
    assert "Job shop-release-r1 deleted (stopped: it cannot run (Unschedulable))" in lines.text
    assert "shop-release-r1" not in release_jobs(slot)
    assert "shop-web" not in slot.images()  # nothing of the release started
