"""The slot's Lease: refused while held, taken over after expiry (naming the holder),
renewed while held, released on every exit path; a deploy that died leaves a pending
release that the next deploy resolves."""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Secret

from shipway.backends.kubernetes.lease import lease_name
from shipway.backends.kubernetes.records import record_name
from shipway.engine import Engine, Rolled
from shipway.guard import Guard
from tests.backends.kubernetes.conftest import Lines, Slot
from tests.testenv.k8s import wait_for

pytestmark = pytest.mark.k8s

OTHER = "ci@runner-7 (pid 4242)"


def plant_lease(slot: Slot, renewed: datetime, holder: str = OTHER) -> None:
    slot.client.create(
        Lease(
            metadata=ObjectMeta(name=lease_name("shop", "test1"), namespace=slot.namespace),
            spec=LeaseSpec(
                holderIdentity=holder,
                leaseDurationSeconds=60,
                acquireTime=renewed,
                renewTime=renewed,
            ),
        )
    )


def lease(slot: Slot) -> Any:
    return slot.client.get(Lease, lease_name("shop", "test1"), namespace=slot.namespace)


def test_a_held_lock_refuses_the_deploy_and_names_its_holder(slot: Slot) -> None:
    slot.write()
    plant_lease(slot, datetime.now(UTC))
    result = slot.cli("deploy", "test1")
    assert result.returncode == 4, result.stderr
    assert f"slot 'test1' is locked by {OTHER}" in result.stderr
    assert "expires at" in result.stderr
    assert slot.images() == {}
    assert lease(slot).spec.holderIdentity == OTHER  # untouched


def test_an_expired_lock_is_taken_over_with_a_line_naming_its_holder(slot: Slot) -> None:
    app = slot.write()
    plant_lease(slot, datetime.now(UTC) - timedelta(seconds=120))
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    assert f"broke the expired lock of slot 'test1' held by {OTHER}" in lines.text
    after = lease(slot)
    assert after.spec.holderIdentity is None  # released
    assert after.spec.leaseTransitions == 1


def test_the_lock_is_renewed_while_held_and_released_after(slot: Slot) -> None:
    app = slot.write()
    engine = Engine(slot.backend(app), Lines(), lock_ttl=2.0)
    clearance = Guard(app.slots).clear("test1")
    done: list[Any] = []
    worker = threading.Thread(
        target=lambda: done.append(
            engine.deploy(clearance, app, "test1", image="registry.example/shop:slow")
        )
    )
    worker.start()
    try:
        # the slow image becomes ready after ~5 s; the 2 s Lease must be renewed meanwhile
        renewed = wait_for(
            slot.client,
            Lease,
            lease_name("shop", "test1"),
            lambda obj: bool(
                obj.spec.holderIdentity
                and obj.spec.renewTime > obj.spec.acquireTime + timedelta(seconds=1)
            ),
            namespace=slot.namespace,
            timeout=30,
        )
        assert renewed.spec.leaseDurationSeconds == 2
    finally:
        worker.join(timeout=60)
    assert done and isinstance(done[0], Rolled)
    assert lease(slot).spec.holderIdentity is None


def wait_walking(slot: Slot, tag: str) -> None:
    """Until the deploy recorded r2 as pending and applied the new web Deployment."""
    wait_for(
        slot.client,
        Secret,
        record_name("shop", 2),
        lambda s: s.metadata.labels.get("status") == "pending",
        namespace=slot.namespace,
        timeout=60,
    )
    wait_for(
        slot.client,
        Deployment,
        "shop-web",
        lambda d: d.spec.template.spec.containers[0].image.endswith(f":{tag}"),
        namespace=slot.namespace,
        timeout=60,
    )


def test_sigterm_undoes_the_rollout_and_releases_the_lock(slot: Slot) -> None:
    app = slot.write()
    assert slot.cli("deploy", "test1").returncode == 0
    proc = slot.start_deploy("registry.example/shop:neverready")
    try:
        wait_walking(slot, "neverready")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, out
    assert "interrupted by SIGTERM: r2 marked failed; restoring r1" in out
    assert "interrupted: restoring r1 done; the lock is released" in out
    assert slot.statuses(app) == {1: "deployed", 2: "failed"}
    assert slot.images()["shop-web"] == "registry.example/shop:1"
    assert lease(slot).spec.holderIdentity is None


def test_a_pending_release_left_by_a_killed_deploy_is_resolved_by_the_next(slot: Slot) -> None:
    app = slot.write()
    assert slot.cli("deploy", "test1").returncode == 0
    proc = slot.start_deploy("registry.example/shop:neverready")
    try:
        wait_walking(slot, "neverready")
        proc.kill()  # SIGKILL: no handler runs; the Lease and the pending record stay
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    held = lease(slot)
    assert held.spec.holderIdentity and "pid" in held.spec.holderIdentity
    assert slot.statuses(app)[2] == "pending"
    assert slot.images()["shop-web"] == "registry.example/shop:neverready"

    # Time passes: the dead deploy's Lease expires (nobody renews it).
    held.spec.renewTime = datetime.now(UTC) - timedelta(seconds=300)
    slot.client.replace(held)

    result = slot.cli("deploy", "test1", "--image", "registry.example/shop:3")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert f"broke the expired lock of slot 'test1' held by {held.spec.holderIdentity}" in out
    assert "recovering: r2 was left pending by an interrupted operation" in out
    assert "re-asserting r1, the deployed release" in out
    assert "rolled shop/test1 from r1 to r3" in out
    assert slot.statuses(app) == {1: "superseded", 2: "failed", 3: "deployed"}
    assert slot.images()["shop-web"] == "registry.example/shop:3"
