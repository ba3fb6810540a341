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
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.batch_v1 import Job

from shipway.engine.outcome import NoAnchor, Rolled, RolledBack
from tests import cliproc
from tests.backends.kubernetes.conftest import BASE_ENV, SHOP, Slot
from tests.backends.kubernetes.test_blue_green import (
    audited,
    blue_green,
    index,
    is_op,
    operations,
    settled,
)

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
    return cliproc.ShipwayProcess(
        [sys.executable, "-m", "shipway", "-f", str(slot.spec_file), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **BASE_ENV, "KUBECONFIG": str(slot.kubeconfig)},
    )
