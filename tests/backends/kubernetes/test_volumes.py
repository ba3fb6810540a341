"""Volumes on the real control plane: one PersistentVolumeClaim per volume, the slot's, that
every release and generation mounts; Deployments mounting a ReadWriteOnce claim use
strategy Recreate and a pod affinity to the node that holds it; the plan says it is not
zero-downtime; ``destroy`` keeps the claim unless told ``--volumes``.

kwok runs no process, so no data is written: what is asserted is that the claim is the same
object (its uid) through deploys, a rollback, a blue-green switch, ``stop`` and ``deploy``,
and the objects that mount it. There is no storage provisioner in the test cluster, so each
test offers one statically made PersistentVolume of its own storage class, which the
controller manager's binder binds the claim to; nothing here waits on binding itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import PersistentVolume, PersistentVolumeClaim, Secret

from shipway import api
from shipway.backends.kubernetes import render, volumes
from shipway.backends.kubernetes.lease import lease_name
from shipway.engine.outcome import Rolled
from shipway.errors import ConfirmationRequired
from shipway.release.model import ImageMeta, Release, ReleaseStatus
from tests.backends.kubernetes.conftest import Lines, Slot
from tests.conftest import app_from_toml
from tests.testenv.k8s import wait_for_all

pytestmark = pytest.mark.k8s

VOLUME = """
[volumes.data]
path = "/var/lib/shop"
processes = ["web"]
size = "2Gi"
storage_class = "{storage_class}"
"""


@pytest.fixture
def storage_class(k8s_client: Client, k8s_namespace: str) -> Iterator[str]:
    """A storage class of the test's own, with one PersistentVolume the claim can bind."""
    name = f"sc-{k8s_namespace}"[:63]
    k8s_client.create(
        from_dict(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "2Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": name,
                    "hostPath": {"path": f"/tmp/{name}"},
                },
            }
        )
    )
    yield name
    k8s_client.delete(PersistentVolume, name)


def claim(slot: Slot) -> Any:
    return slot.client.get(PersistentVolumeClaim, "shop-data", namespace=slot.namespace)


def roll(slot: Slot, app: Any, **kw: Any) -> Lines:
    outcome, lines = slot.deploy(app, **kw)
    assert isinstance(outcome, Rolled), lines.text
    return lines


def test_the_claim_outlives_deploys_rollback_stop_and_destroy_without_volumes(
    slot: Slot, storage_class: str
) -> None:
    app = slot.write()
    app = slot.append(VOLUME.format(storage_class=storage_class))
    plan = api.plan(app, "test1", backend=slot.backend(app))
    text = "\n".join(plan.describe())
    assert "create PersistentVolumeClaim/shop-data" in text
    assert "volume data: PersistentVolumeClaim/shop-data, not created yet, requested 2Gi" in text
    assert "not zero-downtime: web mounts ReadWriteOnce volume data" in text
    assert "worker mounts" not in text

    roll(slot, app)
    made = claim(slot)
    uid = made.metadata.uid
    assert made.spec.accessModes == ["ReadWriteOnce"]
    assert made.spec.resources.requests["storage"] == "2Gi"
    assert made.spec.storageClassName == storage_class
    assert made.metadata.labels[volumes.VOLUME_LABEL] == "data"
    assert render.GENERATION not in made.metadata.labels
    web = slot.deployment("shop-web")
    assert web.spec.strategy.type == "Recreate"
    pod = web.spec.template.spec
    assert [v.persistentVolumeClaim.claimName for v in pod.volumes] == ["shop-data"]
    assert [(m.name, m.mountPath) for m in pod.containers[0].volumeMounts] == [
        ("volume-data", "/var/lib/shop")
    ]
    term = pod.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]
    assert term.topologyKey == "kubernetes.io/hostname"
    assert term.labelSelector.matchLabels["shipway.io/mounts.data"] == "true"
    assert web.spec.template.metadata.labels["shipway.io/mounts.data"] == "true"
    worker = slot.deployment("shop-worker")
    assert worker.spec.strategy.type == "RollingUpdate"  # it mounts nothing
    assert not worker.spec.template.spec.volumes and not worker.spec.template.spec.affinity

    roll(slot, app, image="registry.example/shop:2")
    assert claim(slot).metadata.uid == uid
    outcome = api.rollback(app, "test1", backend=slot.backend(app), reporter=Lines())
    assert isinstance(outcome, Rolled), outcome.line()
    assert claim(slot).metadata.uid == uid
    api.stop(app, "test1", backend=slot.backend(app), reporter=Lines())
    assert slot.deployment("shop-web").spec.replicas == 0
    assert claim(slot).metadata.uid == uid
    roll(slot, app)
    assert claim(slot).metadata.uid == uid

    status = api.status(app, "test1", backend=slot.backend(app))
    [seen] = status.volumes
    assert (seen.name, seen.where, seen.requested) == (
        "data",
        "PersistentVolumeClaim/shop-data",
        "2Gi",
    )
    assert seen.state in ("Pending", "Bound")  # binding is the cluster's: not waited on

    with pytest.raises(ConfirmationRequired):
        api.destroy(app, "test1", backend=slot.backend(app))
    assert slot.deployment("shop-web") is not None

    listed = api.leftovers(app, "test1", backend=slot.backend(app))
    assert [i.name.split(" ")[0] for i in listed if i.data] == ["shop-data"]
    gone = api.destroy(app, "test1", confirm="test1", backend=slot.backend(app), reporter=Lines())
    assert not any(i.data for i in gone)
    assert claim(slot).metadata.uid == uid
    for kind, name in (
        (Deployment, "shop-web"),
        (Secret, "shop-env"),
        (Lease, lease_name("shop", "test1")),
    ):
        with pytest.raises(ApiError) as err:
            slot.client.get(kind, name, namespace=slot.namespace)
        assert err.value.status.code == 404
    assert api.history(app, "test1", backend=slot.backend(app)) == []

    roll(slot, app)  # a new first deploy mounts the same claim
    assert claim(slot).metadata.uid == uid
    api.destroy(
        app, "test1", volumes=True, confirm="test1", backend=slot.backend(app), reporter=Lines()
    )
    wait_for_gone(slot.client, slot.namespace)


def wait_for_gone(client: Client, namespace: str) -> None:
    """The claim is deleted (its protection finalizer lets go once no pod uses it): being
    deleted, or already gone when the wait first lists it."""

    def deleted(claims: dict[str, PersistentVolumeClaim]) -> bool:
        found = claims.get("shop-data")
        return found is None or found.metadata.deletionTimestamp is not None

    wait_for_all(
        client,
        PersistentVolumeClaim,
        deleted,
        namespace=namespace,
        fields={"metadata.name": "shop-data"},
        what="the claim to be deleted",
    )


def test_the_claim_is_the_slots_across_blue_green_generations(
    slot: Slot, storage_class: str
) -> None:
    app = slot.write(slot_extra='strategy = "blue-green"\nsleep_after = 0')
    app = slot.append(VOLUME.format(storage_class=storage_class))
    roll(slot, app)
    uid = claim(slot).metadata.uid
    lines = roll(slot, app, image="registry.example/shop:2")
    first, second = (g.name for g in api.generations(app, "test1", backend=slot.backend(app)))
    assert claim(slot).metadata.uid == uid
    for generation in (first, second):
        web = slot.deployment(render.workload_name("shop", "web", generation))
        spec = web.spec.template.spec
        assert [v.persistentVolumeClaim.claimName for v in spec.volumes] == ["shop-data"]
        assert spec.affinity.podAffinity is not None
    assert "note: web mounts ReadWriteOnce volume data: the pods of every generation" in lines.text

    outcome = api.switch(app, "test1", first, backend=slot.backend(app), reporter=Lines())
    assert isinstance(outcome, Rolled), outcome.line()
    api.gc(app, "test1", 0, backend=slot.backend(app), reporter=Lines())
    assert claim(slot).metadata.uid == uid  # deleting a generation never takes the claim


def test_render_of_claims_strategies_and_modes() -> None:
    text = """
[app]
name = "shop"
image = "registry.example/shop:1"
[processes.web]
command = "serve"
port = 8000
[processes.worker]
command = "work"
[volumes.uploads]
path = "uploads"
access_mode = "ReadWriteMany"
[volumes.cache]
path = "/cache"
processes = ["worker"]
[slots.prod]
backend = "kubernetes"
"""
    app = app_from_toml(text)
    slot = app.slots.get("prod")
    release = Release(
        app="shop", slot="prod", revision=3, status=ReleaseStatus.PENDING, image="r/shop:1",
        image_meta=ImageMeta("dockerfile", "/srv/app"), deployment_ids={"web": "a", "worker": "b"},
    )  # fmt: skip
    units = {u.key: u for u in render.render(app, slot, release)}
    uploads = units["PersistentVolumeClaim/shop-uploads"]
    assert uploads.generation is None and uploads.phase == 0
    assert uploads.body["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    web = units["Deployment/shop-web"].body["spec"]
    assert web["strategy"]["type"] == "RollingUpdate"  # ReadWriteMany: rolling updates stay
    assert "affinity" not in web["template"]["spec"]
    assert web["template"]["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "volume-uploads", "mountPath": "/srv/app/uploads"}
    ]
    worker = units["Deployment/shop-worker"].body["spec"]
    assert worker["strategy"] == {"type": "Recreate"}
    mounts = worker["template"]["spec"]["containers"][0]["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/cache", "/srv/app/uploads"]

    blue = render.render(app, slot, replace(release, generation="prod-1"))
    keys = {u.key: u for u in blue}
    assert keys["PersistentVolumeClaim/shop-uploads"].digest == uploads.digest  # the same one
    gen_worker = keys["Deployment/shop-worker-prod-1"].body["spec"]
    assert "strategy" not in gen_worker  # a generation is not replaced in place
    assert gen_worker["template"]["spec"]["affinity"]["podAffinity"]
