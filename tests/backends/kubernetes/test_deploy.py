"""Deploying to the real control plane: first deploy, upgrade, no-op, pruning, records."""

from __future__ import annotations

import base64
import gzip
import json
import os
import threading
from dataclasses import replace

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Secret, Service

from shipway import api
from shipway.backends.kubernetes import records, render
from shipway.engine.outcome import NoAnchor, Rolled
from shipway.errors import InputError, RecordError
from shipway.spec.model import ConfigFile
from tests.backends.kubernetes.conftest import TOKEN, Slot

pytestmark = pytest.mark.k8s

LABELS = {
    "app.kubernetes.io/name": "shop",
    "app.kubernetes.io/instance": "shop-test1",
    "app.kubernetes.io/managed-by": "shipway",
}


def test_first_deploy_creates_labelled_objects_and_records_it(slot: Slot) -> None:
    app = slot.write()
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    assert (outcome.from_revision, outcome.to_revision) == (None, 1)

    web = slot.deployment("shop-web")
    assert web.metadata.labels == {**LABELS, "app.kubernetes.io/component": "web"}
    assert web.status.availableReplicas == 2
    notes = web.spec.template.metadata.annotations
    assert notes[render.DEPLOYMENT_ID] and notes[render.CONFIG_HASH]
    assert web.metadata.annotations[render.DIGEST]
    appliers = [f.manager for f in web.metadata.managedFields or [] if f.operation == "Apply"]
    assert appliers == ["shipway"]
    assert slot.client.get(Service, "shop-web", namespace=slot.namespace).spec.ports[0].port == 8000

    # The env Secret holds the value in the cluster (envFrom) ...
    env = slot.secret("shop-env")
    assert base64.b64decode(env.data["TOKEN"]).decode() == TOKEN
    assert base64.b64decode(env.data["LOG_LEVEL"]).decode() == "info"
    # ... while the record holds only the placeholder.
    stored = slot.secret(records.record_name("shop", 1))
    assert stored.type == "shipway.io/release.v1"
    assert stored.metadata.labels == {
        "owner": "shipway",
        "name": "shop",
        "status": "deployed",
        "version": "1",
    }
    payload = gzip.decompress(base64.b64decode(stored.data["release"]))
    assert TOKEN.encode() not in payload
    assert json.loads(payload)["revision"] == 1
    assert "${secrets.TOKEN}" in payload.decode()
    # Progress was reported per process with kubectl's counts
    assert ("web", {"desired": 2, "updated": 2, "ready": 2, "available": 2}, "") in (
        lines.progress_seen
    )


def test_upgrade_rolls_to_a_new_replicaset_and_supersedes_the_anchor(slot: Slot) -> None:
    app = slot.write()
    slot.deploy(app)
    before = set(slot.replicasets("shop-web"))
    outcome, lines = slot.deploy(app, image="registry.example/shop:2")
    assert isinstance(outcome, Rolled), lines.text
    assert (outcome.from_revision, outcome.to_revision) == (1, 2)
    assert slot.images() == {
        "shop-web": "registry.example/shop:2",
        "shop-worker": "registry.example/shop:2",
    }
    after = slot.replicasets("shop-web")
    new = set(after) - before
    assert len(new) == 1 and after[new.pop()].status.readyReplicas == 2
    assert slot.statuses(app) == {1: "superseded", 2: "deployed"}
    # The prerequisites did not change, so they were not applied again
    assert not any("Secret/shop-env" in line for line in lines.lines if "] " in line)


def test_a_forced_deploy_with_nothing_changed_re_applies_only_the_workloads(slot: Slot) -> None:
    app = slot.write()
    slot.deploy(app)
    unforced = api.plan(app, "test1", image="registry.example/shop:1", backend=slot.backend(app))
    assert unforced.unchanged  # "no changes": a deploy would apply nothing
    plan = api.plan(
        app, "test1", image="registry.example/shop:1", force=True, backend=slot.backend(app)
    )
    # A forced deploy rolls (a fresh deployment id); what did not change is not applied.
    keys = [getattr(s, "unit", "") for s in plan.steps]
    assert keys[:2] == ["Deployment/shop-web", "Deployment/shop-worker"]
    assert "Secret/shop-env" not in keys and "Service/shop-web" not in keys
    assert "Namespace/" + slot.namespace not in keys


def test_repair_puts_back_what_drifted_and_replaces_nothing_else(slot: Slot) -> None:
    app = slot.write()
    slot.deploy(app)
    web_rs = set(slot.replicasets("shop-web"))
    slot.client.delete(Service, "shop-web", namespace=slot.namespace)
    worker = slot.deployment("shop-worker")
    worker.spec.replicas = 0
    slot.client.replace(worker)

    result = slot.cli("repair", "test1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "create Service/shop-web" in result.stdout
    assert "start Deployment/shop-worker" in result.stdout
    assert "Deployment/shop-web" not in result.stdout
    assert slot.client.get(Service, "shop-web", namespace=slot.namespace).spec.ports
    assert slot.deployment("shop-worker").status.availableReplicas == 1
    assert set(slot.replicasets("shop-web")) == web_rs


def test_objects_that_left_the_spec_are_pruned(slot: Slot) -> None:
    app = slot.write()
    slot.deploy(app)
    smaller = slot.edit('[processes.worker]\ncommand = "work"', "")
    assert list(smaller.processes) == ["web"]
    outcome, lines = slot.deploy(smaller)
    assert isinstance(outcome, Rolled), lines.text
    assert "remove Deployment/shop-worker (no longer declared)" in lines.text
    names = {d.metadata.name for d in slot.client.list(Deployment, namespace=slot.namespace)}
    assert names == {"shop-web"}


def test_objects_of_other_apps_in_the_namespace_are_left_alone(slot: Slot) -> None:
    app = slot.write()
    slot.deploy(app)
    other = slot.edit('name = "shop"', 'name = "blog"')
    outcome, lines = slot.deploy(other)
    assert isinstance(outcome, Rolled), lines.text
    assert "remove" not in lines.text
    names = {d.metadata.name for d in slot.client.list(Deployment, namespace=slot.namespace)}
    assert names == {"shop-web", "shop-worker", "blog-web", "blog-worker"}


def test_history_is_capped_without_dropping_the_deployed_release(slot: Slot) -> None:
    app = slot.write(slot_extra="history_limit = 2")
    for n in range(1, 4):
        outcome, lines = slot.deploy(app, image=f"registry.example/shop:{n}")
        assert isinstance(outcome, Rolled), lines.text
    assert slot.statuses(app) == {2: "superseded", 3: "deployed"}
    with pytest.raises(ApiError):
        slot.client.get(Secret, records.record_name("shop", 1), namespace=slot.namespace)


def test_a_record_over_the_secret_limit_is_refused_before_anything_is_applied(
    slot: Slot,
) -> None:
    big = base64.b64encode(os.urandom(900 * 1024)).decode()
    # a spec file that large is refused by the loader itself (256 KiB): the app is given
    # the file through the Python API instead, as a program building its App would
    app = replace(slot.write(), files=(ConfigFile("blob.txt", big),))
    with pytest.raises(RecordError, match="over the 1048576-byte limit"):
        slot.deploy(app)
    assert list(slot.client.list(Deployment, namespace=slot.namespace)) == []


def test_a_failed_first_deploy_removes_its_workloads_and_says_no_anchor(slot: Slot) -> None:
    app = slot.write()
    outcome, lines = slot.deploy(app, image="registry.example/shop:crashloop")
    assert isinstance(outcome, NoAnchor), lines.text
    assert outcome.exit_code == 12
    assert outcome.failure.reason == "CrashLoopBackOff"
    assert "nothing was running before it" in outcome.line()
    assert list(slot.client.list(Deployment, namespace=slot.namespace)) == []
    assert slot.statuses(app) == {1: "failed"}


def test_an_image_is_required(slot: Slot) -> None:
    slot.write()
    app = slot.edit('image = "registry.example/shop:1"', "")
    with pytest.raises(InputError, match="needs an image"):
        slot.deploy(app)


def test_an_api_call_closes_the_backend_it_opened(slot: Slot) -> None:
    """No watch thread (nor its connections) outlives ``api.deploy`` or ``api.status``."""
    app = slot.write()
    before = {t.ident for t in threading.enumerate() if t.name == "shipway-watch"}
    outcome = api.deploy(app, "test1", timeout=120)
    assert isinstance(outcome, Rolled)
    assert api.status(app, "test1").deployed is not None
    left = {t.ident for t in threading.enumerate() if t.name == "shipway-watch"} - before
    assert left == set()
