"""``shipway set-image`` on a Deployment created directly through the API (not by shipway):
the container's image read first as the anchor, only that image patched, the same
fail-fast wait as a deploy, the anchor put back on failure, recorded in the slot's history.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from lightkube.codecs import from_dict
from lightkube.resources.apps_v1 import Deployment

from tests.backends.kubernetes.conftest import Slot
from tests.testenv.k8s import wait_for

pytestmark = pytest.mark.k8s


def legacy(slot: Slot, image: str = "registry.example/legacy:1") -> Any:
    """A Deployment made by hand (another field manager), with a sidecar beside ``app``."""
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "legacy", "namespace": slot.namespace, "labels": {"team": "ops"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "legacy"}},
            "template": {
                "metadata": {"labels": {"app": "legacy"}},
                "spec": {
                    "containers": [
                        {"name": "app", "image": image},
                        {"name": "sidecar", "image": "registry.example/proxy:1"},
                    ]
                },
            },
        },
    }
    slot.client.create(from_dict(body), field_manager="kubectl-create")
    return wait_for(
        slot.client,
        Deployment,
        "legacy",
        lambda d: (d.status and d.status.availableReplicas == 2) or None,
        namespace=slot.namespace,
        timeout=60,
        what="the hand-made Deployment available",
    )


def containers(slot: Slot) -> dict[str, str]:
    dep = slot.deployment("legacy")
    return {c.name: c.image for c in dep.spec.template.spec.containers}


def test_set_image_rolls_a_deployment_shipway_did_not_render(slot: Slot) -> None:
    slot.write()
    legacy(slot)
    rolled = slot.cli("set-image", "test1", "Deployment/legacy:app", "registry.example/legacy:2")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert "set the image of Deployment/legacy:app to registry.example/legacy:2" in rolled.stdout
    assert "(was registry.example/legacy:1)" in rolled.stdout
    assert containers(slot) == {
        "app": "registry.example/legacy:2",
        "sidecar": "registry.example/proxy:1",
    }
    dep = slot.deployment("legacy")
    assert dep.status.updatedReplicas == dep.status.availableReplicas == 2
    assert dep.metadata.labels == {"team": "ops"}  # nothing but the image was touched
    history = json.loads(slot.cli("history", "test1", "-o", "json").stdout)["releases"]
    assert [(r["revision"], r["status"]) for r in history] == [(1, "deployed")]
    assert history[0]["description"] == (
        "set-image Deployment/legacy:app registry.example/legacy:2 (was registry.example/legacy:1)"
    )
    # the spec has one slot: SLOT may be left out
    again = slot.cli("set-image", "Deployment/legacy:app", "registry.example/legacy:2")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "no changes:" in again.stdout, again.stdout
    history = json.loads(slot.cli("history", "test1", "-o", "json").stdout)["releases"]
    assert [r["revision"] for r in history] == [1]  # the same image again: no revision


def test_set_image_puts_the_anchor_back_when_the_new_image_crash_loops(slot: Slot) -> None:
    slot.write()
    legacy(slot)
    first = slot.cli("set-image", "test1", "Deployment/legacy:app", "registry.example/legacy:2")
    assert first.returncode == 0, first.stdout + first.stderr
    failed = slot.cli(
        "set-image", "test1", "Deployment/legacy:app", "registry.example/legacy:crashloop",
        "-o", "json",
    )  # fmt: skip
    assert failed.returncode == 10, failed.stdout + failed.stderr
    outcome = json.loads(failed.stdout)
    assert outcome["outcome"] == "rolled-back"
    assert outcome["failure"]["reason"] == "CrashLoopBackOff"
    assert outcome["failure"]["process"] == "Deployment/legacy"
    assert (outcome["failed"], outcome["to"]) == (2, 1)
    assert containers(slot)["app"] == "registry.example/legacy:2"
    dep = slot.deployment("legacy")
    assert dep.status.availableReplicas == 2 and dep.status.updatedReplicas == 2
    history = json.loads(slot.cli("history", "test1", "-o", "json").stdout)["releases"]
    assert [(r["revision"], r["status"]) for r in history] == [(1, "deployed"), (2, "failed")]


def test_the_first_set_image_that_fails_restores_the_image_it_read(slot: Slot) -> None:
    slot.write()
    legacy(slot)
    failed = slot.cli(
        "set-image", "test1", "Deployment/legacy:app", "registry.example/legacy:crashloop"
    )
    assert failed.returncode == 10, failed.stdout + failed.stderr
    assert "Deployment/legacy:app on registry.example/legacy:1 is serving again" in failed.stdout
    assert containers(slot)["app"] == "registry.example/legacy:1"


def test_set_image_refuses_what_it_cannot_or_must_not_roll(slot: Slot) -> None:
    app = slot.write()
    legacy(slot)
    slot.deploy(app)  # shop-web and shop-worker are shipway's own
    ours = slot.cli("set-image", "test1", "Deployment/shop-web", "registry.example/shop:2")
    assert ours.returncode == 2 and "applied by shipway itself" in ours.stderr
    two = slot.cli("set-image", "test1", "Deployment/legacy", "registry.example/legacy:2")
    assert two.returncode == 2 and "has 2 containers (app, sidecar): name one" in two.stderr
    missing = slot.cli("set-image", "test1", "Deployment/nope:app", "registry.example/x:1")
    assert missing.returncode == 2 and f"no Deployment nope in namespace {slot.namespace}" in (
        missing.stderr
    )
    bad = slot.cli("set-image", "test1", "legacy", "registry.example/x:1")
    assert bad.returncode == 2 and "is not KIND/NAME[:CONTAINER]" in bad.stderr
    assert containers(slot)["app"] == "registry.example/legacy:1"
