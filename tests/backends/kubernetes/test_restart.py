"""Targeted restart and ``shipway rollback`` through the CLI, on the real control plane."""

from __future__ import annotations

import json

import pytest

from tests.backends.kubernetes.conftest import Slot

pytestmark = pytest.mark.k8s


def test_restarting_one_process_leaves_the_others_untouched(slot: Slot) -> None:
    app = slot.write()
    assert slot.cli("deploy", "test1").returncode == 0
    web_before = slot.deployment("shop-web")
    web_rs = set(slot.replicasets("shop-web"))
    worker_before = slot.deployment("shop-worker")
    worker_rs = set(slot.replicasets("shop-worker"))

    result = slot.cli("restart", "test1", "worker")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rolled shop/test1 from r1 to r2" in result.stdout
    assert "update Deployment/shop-worker" in result.stdout
    assert "Deployment/shop-web" not in result.stdout

    web_after = slot.deployment("shop-web")
    # web: same ReplicaSets, byte-identical pod template, not even re-applied
    assert set(slot.replicasets("shop-web")) == web_rs
    assert web_after.spec.template.to_dict() == web_before.spec.template.to_dict()
    assert web_after.metadata.generation == web_before.metadata.generation
    assert web_after.metadata.resourceVersion == web_before.metadata.resourceVersion
    # worker: a fresh deployment id, so a new ReplicaSet
    worker_after = slot.deployment("shop-worker")
    old_id = worker_before.spec.template.metadata.annotations["shipway.io/deployment-id"]
    new_id = worker_after.spec.template.metadata.annotations["shipway.io/deployment-id"]
    assert new_id != old_id
    assert len(set(slot.replicasets("shop-worker")) - worker_rs) == 1

    records = slot.records(app)
    assert records[2].description == "restart worker"
    assert records[2].deployment_ids["web"] == records[1].deployment_ids["web"]
    assert records[2].deployment_ids["worker"] == new_id
    assert slot.statuses(app) == {1: "superseded", 2: "deployed"}

    status = json.loads(slot.cli("status", "test1", "-o", "json").stdout)
    assert status["deployed"]["revision"] == 2
    ids = {p["process"]: p["deployment_id"] for p in status["processes"]}
    assert ids == {"web": old_id, "worker": new_id}
    assert all(p["ready"] == p["desired"] for p in status["processes"])


def test_rollback_re_applies_a_recorded_revision_as_a_new_one(slot: Slot) -> None:
    app = slot.write()
    assert slot.cli("deploy", "test1").returncode == 0
    r1_template = slot.deployment("shop-web").spec.template.to_dict()
    assert slot.cli("deploy", "test1", "--image", "registry.example/shop:2").returncode == 0

    result = slot.cli("rollback", "test1", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rolled shop/test1 from r2 to r3" in result.stdout
    assert slot.deployment("shop-web").spec.template.to_dict() == r1_template
    records = slot.records(app)
    assert records[3].description == "rollback to r1"
    assert slot.statuses(app) == {1: "superseded", 2: "superseded", 3: "deployed"}

    missing = slot.cli("rollback", "test1", "9")
    assert missing.returncode == 2 and "no revision 9" in missing.stderr
