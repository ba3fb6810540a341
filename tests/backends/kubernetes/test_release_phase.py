"""The release phase and one-off commands on the real control plane.

kwok runs no process: what is asserted is the objects shipway makes and the order of the
API operations (the API server's own audit log). The release command's Job is created and
completes before any Deployment is written — so no pod of the release (and no readiness
probe reading its database) exists before the schema is made — and a failing one writes
no Deployment at all. ``shipway run`` makes a pod from the process's pod template, returns
what kwok reports as its container's exit code, and deletes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import Pod

from shipway.backends.kubernetes import render
from shipway.engine.outcome import NoAnchor, Rolled, RolledBack
from tests.backends.kubernetes.conftest import BASE_ENV, SHOP, TOKEN, Slot
from tests.backends.kubernetes.test_blue_green import (
    audited,
    blue_green,
    index,
    is_op,
    operations,
    settled,
)
from tests.testenv.k8s import wait_for_all

pytestmark = pytest.mark.k8s

MIGRATE = 'image_type = "dockerfile"\nrelease_command = "python manage.py migrate"'


def when(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def deployment_writes(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        e
        for e in ops
        if e["objectRef"].get("resource") == "deployments"
        and e["verb"] in ("create", "update", "patch")
    ]


def test_the_release_job_completes_before_any_deployment_is_written(
    slot: Slot, k8s_audit_log: Path
) -> None:
    slot.write()
    app = slot.edit('image_type = "dockerfile"', MIGRATE)
    with audited(k8s_audit_log) as events:
        outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    ops = settled(events, slot.namespace, is_op("patch", "deployments"))
    job = index(ops, "the release Job's apply", is_op("patch", "jobs", "shop-release-r1"))
    env = index(ops, "the env Secret's apply", is_op("patch", "secrets", "shop-env"))
    writes = deployment_writes(ops)
    assert writes, "the Deployments were applied"
    first = ops.index(writes[0])
    assert env < job < first  # its env before it; every Deployment after it
    done = slot.client.get(Job, "shop-release-r1", namespace=slot.namespace)
    assert done.status.succeeded == 1 and done.status.completionTime is not None
    # it had completed before the first Deployment (and so any pod that probes) was written
    assert done.status.completionTime <= when(writes[0])


def test_a_failing_release_job_writes_no_deployment(slot: Slot, k8s_audit_log: Path) -> None:
    slot.write()
    app = slot.edit('image_type = "dockerfile"', MIGRATE)
    slot.deploy(app)
    before = {name: set(slot.replicasets(name)) for name in ("shop-web", "shop-worker")}
    with audited(k8s_audit_log) as events:
        outcome, lines = slot.deploy(app, image="registry.example/shop:crashloop")
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason == "ReleaseCommandFailed"
    ops = operations(events(), slot.namespace)
    index(ops, "the release Job", is_op("patch", "jobs", "shop-release-r2"))
    assert deployment_writes(ops) == []  # nothing new started: no Deployment was touched
    assert {name: set(slot.replicasets(name)) for name in before} == before
    assert slot.images()["shop-web"] == "registry.example/shop:1"


def test_a_first_deploy_whose_release_job_fails_creates_no_deployment(slot: Slot) -> None:
    slot.write()
    app = slot.edit(":1\"", ":crashloop\"")
    app = slot.edit('image_type = "dockerfile"', MIGRATE)
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, NoAnchor), lines.text
    assert slot.images() == {}


def test_a_new_generation_runs_its_release_job_before_any_of_its_deployments(
    slot: Slot, k8s_audit_log: Path
) -> None:
    app = slot.write(slot_extra=blue_green(slot))
    app = slot.edit('image_type = "dockerfile"', MIGRATE)
    slot.deploy(app)
    with audited(k8s_audit_log) as events:
        outcome, lines = slot.deploy(app, image="registry.example/shop:2")
    assert isinstance(outcome, Rolled), lines.text
    g2 = slot.records(app)[2].generation
    assert g2
    ops = settled(events, slot.namespace, is_op("patch", "ingresses"))
    job = index(ops, "the release Job", is_op("patch", "jobs", "shop-release-r2"))
    env = index(ops, "the generation's env", is_op("patch", "secrets", f"shop-env-{g2}"))
    first = index(ops, "the generation's Deployments", is_op("patch", "deployments"))
    assert env < job < first
    assert g2 in ops[first]["objectRef"]["name"]


def test_a_failing_release_job_starts_nothing_of_the_new_generation(slot: Slot) -> None:
    app = slot.write(slot_extra=blue_green(slot))
    app = slot.edit('image_type = "dockerfile"', MIGRATE)
    slot.deploy(app)
    outcome, lines = slot.deploy(app, image="registry.example/shop:crashloop")
    assert isinstance(outcome, RolledBack), lines.text
    g2 = slot.records(app)[2].generation
    assert g2
    names = set(slot.images())
    assert not any(g2 in n for n in names), names  # no Deployment of the new generation


# -- one-off commands ---------------------------------------------------------------------

#: the shop, on an image kwok fails at once, with no replica of any process (so it rolls)
RUN_SPEC = (
    SHOP.replace(":1\"", ":crashloop\"")
    .replace("replicas = 2", "replicas = 0")
    .replace('command = "work"', 'command = "work"\nreplicas = 0')
)


def cli(slot: Slot, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "shipway", "-f", str(slot.spec_file), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **BASE_ENV, "KUBECONFIG": str(slot.kubeconfig)},
    )


def test_run_makes_a_pod_from_the_template_returns_its_exit_code_and_deletes_it(
    slot: Slot, k8s_audit_log: Path
) -> None:
    """The release's image is one kwok fails at once (``:crashloop``; its processes have no
    replicas, so the deploy rolls): the one-off pod runs, and kwok reports exit code 1."""
    slot.write(RUN_SPEC)
    assert slot.cli("deploy", "test1").returncode == 0
    with audited(k8s_audit_log) as events:
        p = cli(slot, "run", "test1", "--", "python", "manage.py", "shell", "-c", "print(1)")
        pods = wait_for_all(
            slot.client,
            Pod,
            lambda found: [o for o in found.values() if render.ONE_OFF in o.metadata.labels]
            or None,
            namespace=slot.namespace,
            timeout=60,
            what="the one-off pod",
        )
        out, err = p.communicate(timeout=120)
    assert p.returncode == 1, err  # what kwok reports for the container's exit
    [pod] = pods
    name = pod.metadata.name
    assert name.startswith("shop-run-web-")
    container = pod.spec.containers[0]
    assert container.args == ["python", "manage.py", "shell", "-c", "print(1)"]
    assert container.image == "registry.example/shop:crashloop"
    assert container.envFrom[0].secretRef.name == "shop-env"  # the release's env and secrets
    assert container.readinessProbe is None and container.ports is None
    assert pod.spec.restartPolicy == "Never"
    assert render.COMPONENT not in pod.metadata.labels  # no Service, no ReplicaSet takes it
    assert f"pod {name} created" in err and f"pod {name} deleted" in err
    assert "the cluster gives no log" in err  # kwok runs nothing, so it has no log
    assert TOKEN not in out + err
    ops = settled(events, slot.namespace, is_op("delete", "pods", name))
    assert index(ops, "the pod's create", is_op("create", "pods", name)) < index(
        ops, "the pod's delete", is_op("delete", "pods", name)
    )
    left = [
        o.metadata.name
        for o in slot.client.list(Pod, namespace=slot.namespace)
        if render.ONE_OFF in o.metadata.labels and not o.metadata.deletionTimestamp
    ]
    assert left == []


def test_run_is_refused_on_a_guarded_slot_and_without_a_terminal_to_give(
    slot: Slot, k8s_audit_log: Path
) -> None:
    slot.write(RUN_SPEC, slot_extra='role = "production"')
    assert slot.cli("deploy", "test1", "--confirm", "test1").returncode == 0
    with audited(k8s_audit_log) as events:
        refused = slot.cli("run", "test1", "--", "env")
        interactive = slot.cli("run", "test1", "--confirm", "test1", "-i", "--", "sh")
    assert refused.returncode == 3, refused.stderr
    assert "--confirm test1" in refused.stderr
    assert interactive.returncode == 2, interactive.stderr
    assert "cannot pass standard input or a terminal" in interactive.stderr
    ops = operations(events(), slot.namespace)
    assert not [e for e in ops if e["objectRef"].get("resource") == "pods" and e["verb"] ==
                "create"]  # fmt: skip


def test_what_a_pod_wrote_inside_itself_cannot_be_told(slot: Slot) -> None:
    """The docs say so: a pod's own filesystem is the kubelet's, and goes with the pod."""
    app = slot.write()
    outcome, _ = slot.deploy(app)
    assert isinstance(outcome, Rolled)
    backend = slot.backend(app)
    [release] = slot.records(app).values()
    assert backend.runtime_files(app.slots.target("test1"), release) is None


def test_run_passes_e_to_the_pod_and_sigterm_deletes_it_and_exits_143(slot: Slot) -> None:
    """A pod kwok keeps running (the ``:1`` image): ``-e`` is in its container's env; a
    SIGTERM to shipway deletes it and exits 143, with no traceback."""
    slot.write(RUN_SPEC.replace(':crashloop"', ':1"'))
    assert slot.cli("deploy", "test1").returncode == 0
    p = cli(slot, "run", "test1", "-e", "DJANGO_SUPERUSER_USERNAME=ann", "--", "sleep", "600")
    try:
        [pod] = wait_for_all(
            slot.client,
            Pod,
            lambda found: [o for o in found.values() if render.ONE_OFF in o.metadata.labels
                           and o.status and o.status.phase == "Running"] or None,
            namespace=slot.namespace,
            timeout=60,
            what="the one-off pod running",
        )  # fmt: skip
        env = {e.name: e.value for e in pod.spec.containers[0].env or []}
        assert env.get("DJANGO_SUPERUSER_USERNAME") == "ann"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143, err
    assert "Traceback" not in err and f"pod {pod.metadata.name} deleted" in err, err
    left = [
        o.metadata.name
        for o in slot.client.list(Pod, namespace=slot.namespace)
        if render.ONE_OFF in o.metadata.labels and not o.metadata.deletionTimestamp
    ]
    assert left == []


def test_a_one_off_pod_whose_shipway_was_killed_is_deleted_by_the_next_run(slot: Slot) -> None:
    """kill -9 leaves no ``finally``: the pod stays (kwok keeps the ``:1`` image running).
    It carries its shipway's host, pid and start time, so the next ``run`` on the slot can
    prove it orphaned and deletes it."""
    slot.write(RUN_SPEC.replace(':crashloop"', ':1"'))
    assert slot.cli("deploy", "test1").returncode == 0
    p = cli(slot, "run", "test1", "--", "sleep", "600")
    try:
        [pod] = wait_for_all(
            slot.client,
            Pod,
            lambda found: [o for o in found.values() if render.ONE_OFF in o.metadata.labels]
            or None,
            namespace=slot.namespace,
            timeout=60,
            what="the one-off pod",
        )
    finally:
        p.kill()
        p.communicate(timeout=60)
    orphan = pod.metadata.name
    assert slot.client.get(Pod, orphan, namespace=slot.namespace).metadata.deletionTimestamp is None
    # the next release's image is one kwok ends at once, so the next run returns
    slot.write(RUN_SPEC)
    assert slot.cli("deploy", "test1").returncode == 0
    second = slot.cli("run", "test1", "--", "true")
    assert f"deleted one-off pod {orphan}: the shipway that ran it" in second.stderr, second.stderr
    left = [
        o.metadata.name
        for o in slot.client.list(Pod, namespace=slot.namespace)
        if render.ONE_OFF in o.metadata.labels and not o.metadata.deletionTimestamp
    ]
    assert orphan not in left
