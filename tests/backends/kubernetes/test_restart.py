"""Targeted restart and ``shipway rollback`` through the CLI, on the real control plane."""

from __future__ import annotations

import json

import pytest

from tests.backends.kubernetes.conftest import TOKEN, Slot

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


def test_stop_scales_to_zero_and_a_restart_brings_every_process_back(slot: Slot) -> None:
    app = slot.write()
    assert slot.cli("deploy", "test1").returncode == 0
    stopped = slot.cli("stop", "test1")
    assert stopped.returncode == 0, stopped.stderr
    assert "scaled shop-web to 0" in stopped.stdout
    assert slot.deployment("shop-web").spec.replicas == 0
    assert slot.statuses(app) == {1: "deployed"}  # the records stay

    back = slot.cli("restart", "test1", "web")
    assert back.returncode == 0, back.stdout + back.stderr
    assert "start Deployment/shop-worker" in back.stdout  # kept as recorded, but stopped
    assert slot.deployment("shop-web").status.availableReplicas == 2
    assert slot.deployment("shop-worker").status.availableReplicas == 1


def test_logs_say_plainly_when_the_kubelet_has_none(
    slot: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = slot.write()
    assert slot.cli("deploy", "test1").returncode == 0
    # The values to mask in log lines come from what the pods were given, even where the
    # spec's references cannot be resolved (another machine, another environment).
    monkeypatch.delenv("SHOP_TOKEN")
    assert TOKEN in slot.backend(app)._secret_values()
    result = slot.cli("logs", "test1", "web")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(": no logs: " in line for line in lines)
    assert all(line.startswith("shop-web-") for line in lines)
