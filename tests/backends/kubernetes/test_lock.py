"""The slot's Lease: refused while held, taken over after expiry (naming the holder),
renewed while held, released on every exit path; a deploy that died leaves a pending
release that the next deploy resolves; once the lock is lost (taken over, or not renewed
within its duration) the backend mutates nothing more and its waits stop.

Expiry is judged by the time this client saw the Lease last change, never by the holder's
``renewTime`` (whose clock may be off): a Lease someone keeps renewing is live however old
its ``renewTime`` looks, and one nobody renews is taken over once it has not changed for its
whole duration. A holder whose process is provably gone from this machine (a killed
deploy) is taken over at once."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Secret

from shipway.backends.kubernetes.lease import lease_name
from shipway.backends.kubernetes.records import record_name
from shipway.backends.protocol import LockHolder
from shipway.engine import Engine, Rolled
from shipway.engine.request import DeployRequest
from shipway.errors import BackendError
from shipway.guard import Guard
from shipway.release.artifact import Unit
from tests.backends.kubernetes.conftest import Lines, Slot
from tests.testenv.k8s import wait_for

pytestmark = pytest.mark.k8s

OTHER = "ci@runner-7 (pid 4242)"


def plant_lease(slot: Slot, renewed: datetime, holder: str = OTHER, duration: int = 60) -> None:
    slot.client.create(
        Lease(
            metadata=ObjectMeta(name=lease_name("shop", "test1"), namespace=slot.namespace),
            spec=LeaseSpec(
                holderIdentity=holder,
                leaseDurationSeconds=duration,
                acquireTime=renewed,
                renewTime=renewed,
            ),
        )
    )


def lease(slot: Slot) -> Any:
    return slot.client.get(Lease, lease_name("shop", "test1"), namespace=slot.namespace)


@contextlib.contextmanager
def renewing(slot: Slot, skew: timedelta = timedelta(0)) -> Iterator[None]:
    """Another machine's live deploy: it renews its Lease every 0.3 s, writing renewal
    times by its own clock, ``skew`` away from ours."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.3):
            current = lease(slot)
            current.spec.renewTime = datetime.now(UTC) + skew
            with contextlib.suppress(ApiError):
                slot.client.replace(current)

    thread = threading.Thread(target=renew, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_a_held_lock_refuses_the_deploy_and_names_its_holder(slot: Slot) -> None:
    slot.write()
    plant_lease(slot, datetime.now(UTC))
    with renewing(slot):
        result = slot.cli("deploy", "test1")
    assert result.returncode == 4, result.stderr
    assert f"slot 'test1' is locked by {OTHER}" in result.stderr
    assert "expires at" in result.stderr
    assert slot.images() == {}
    assert lease(slot).spec.holderIdentity == OTHER  # untouched


def test_a_live_lock_whose_holder_s_clock_is_behind_is_not_broken(slot: Slot) -> None:
    # The holder's clock is two hours behind ours: by its renewTime the Lease looks long
    # expired, but it is renewed all the time. Judged by when this client saw it change,
    # it is live.
    slot.write()
    behind = timedelta(hours=-2)
    plant_lease(slot, datetime.now(UTC) + behind, duration=5)
    with renewing(slot, skew=behind):
        result = slot.cli("deploy", "test1")
    out = result.stdout + result.stderr
    assert result.returncode == 4, out
    assert f"slot 'test1' is locked by {OTHER}" in out
    assert "broke" not in out
    assert slot.images() == {}
    assert lease(slot).spec.holderIdentity == OTHER


def test_an_expired_lock_is_taken_over_with_a_line_naming_its_holder(slot: Slot) -> None:
    app = slot.write()
    # nobody renews it: once it has not changed for its duration (2 s) while this client
    # watched it, it is expired — whatever its renewTime says
    plant_lease(slot, datetime.now(UTC) + timedelta(hours=1), duration=2)
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    assert f"the lock of slot 'test1' is held by {OTHER}" in lines.text
    assert f"broke the expired lock of slot 'test1' held by {OTHER}" in lines.text
    assert "not renewed for 2s while this client watched it" in lines.text
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
            engine.deploy(
                clearance, app, "test1", DeployRequest(image="registry.example/shop:slow")
            )
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
    assert held.spec.holderIdentity and f"(pid {proc.pid})" in held.spec.holderIdentity
    assert held.spec.leaseDurationSeconds == 15  # client-go's lease, renewed every 2 s
    assert slot.statuses(app)[2] == "pending"
    assert slot.images()["shop-web"] == "registry.example/shop:neverready"

    # The dead deploy ran on this machine and its process is gone: the Lease, still
    # fresh, is taken over at once (no waiting for it to expire), with a line saying so.
    result = slot.cli("deploy", "test1", "--image", "registry.example/shop:3")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert (
        f"broke the lock of slot 'test1' held by {held.spec.holderIdentity}" in out
        and f"its process {proc.pid} is gone from this machine (taken over at once" in out
    ), out
    assert "watching it for up to" not in out
    assert "recovering: r2 was left pending by an interrupted operation" in out
    assert "re-asserting r1, the deployed release" in out
    assert "rolled shop/test1 from r1 to r3" in out
    assert slot.statuses(app) == {1: "superseded", 2: "failed", 3: "deployed"}
    assert slot.images()["shop-web"] == "registry.example/shop:3"


LOST = "lost the lock on shop/test1: {}; another operation may have taken it over — stopping"


def config_map(slot: Slot, name: str) -> Unit:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": slot.namespace},
        "data": {"k": "v"},
    }
    return Unit(f"ConfigMap/{name}", "ConfigMap", body, phase=0)


def config_maps(slot: Slot) -> set[str]:
    return {c.metadata.name for c in slot.client.list(ConfigMap, namespace=slot.namespace)}


def take_over(slot: Slot, holder: str = OTHER) -> None:
    """Another operation writes itself into the Lease (as if it had found it expired)."""
    for _ in range(20):  # our renewals may move the resourceVersion under us
        current = lease(slot)
        current.spec.holderIdentity = holder
        current.spec.renewTime = datetime.now(UTC)
        try:
            slot.client.replace(current)
            return
        except ApiError as exc:
            if exc.status.code != 409:
                raise
    raise AssertionError("could not write another holder into the Lease")


def test_a_lock_taken_over_stops_every_mutation(slot: Slot) -> None:
    app = slot.write()
    backend = slot.backend(app)
    target = app.slots.target("test1")
    clearance = Guard(app.slots).clear("test1")
    with backend.lock(clearance, target, LockHolder.me(ttl=1.5), Lines()):
        backend.apply(clearance, target, config_map(slot, "before"), "create", {}, Lines())
        assert backend.lease is not None
        take_over(slot)
        # the next renewal (every 0.5 s) meets the other holder's write
        assert backend.lease.lost_event.wait(timeout=30)
        refused = LOST.format(r"it changed hands \(409 Conflict\)")
        with pytest.raises(BackendError, match=refused):
            backend.apply(clearance, target, config_map(slot, "after"), "create", {}, Lines())
        with pytest.raises(BackendError, match=refused):
            backend.write_records(clearance, target, [])
    assert "before" in config_maps(slot) and "after" not in config_maps(slot)
    assert lease(slot).spec.holderIdentity == OTHER  # not released under its new holder


def test_a_lock_not_renewed_within_its_duration_stops_every_mutation(slot: Slot) -> None:
    app = slot.write()
    backend = slot.backend(app)
    target = app.slots.target("test1")
    clearance = Guard(app.slots).clear("test1")
    with backend.lock(clearance, target, LockHolder.me(ttl=60), Lines()):
        assert backend.lease is not None
        held = backend.lease
        held._stop.set()  # no renewal succeeds from here on ...
        assert held._thread is not None
        held._thread.join()
        start = held.clock()
        held.clock = lambda: start + 11  # ... while 11 s pass on its clock
        refused = LOST.format(
            r"it was last renewed 1\d\.\ds ago, beyond its 10s renew deadline "
            r"\(the Lease lasts 15s\)"
        )
        with pytest.raises(BackendError, match=refused):
            backend.apply(clearance, target, config_map(slot, "late"), "create", {}, Lines())
        with pytest.raises(BackendError, match=refused):
            backend.write_records(clearance, target, [])
    assert "late" not in config_maps(slot)


def test_a_deploy_waiting_when_its_lock_is_taken_over_stops_there(slot: Slot) -> None:
    app = slot.write()
    assert slot.cli("deploy", "test1").returncode == 0
    backend = slot.backend(app)
    lines = Lines()
    engine = Engine(backend, lines, lock_ttl=1.5)
    clearance = Guard(app.slots).clear("test1")
    done: list[Any] = []

    def deploy() -> None:
        try:
            image = "registry.example/shop:neverready"
            done.append(engine.deploy(clearance, app, "test1", DeployRequest(image=image)))
        except Exception as exc:  # what the engine makes of it is the engine's business
            done.append(exc)

    worker = threading.Thread(target=deploy)
    worker.start()
    try:
        wait_walking(slot, "neverready")
        take_over(slot)
    finally:
        worker.join(timeout=60)
    assert not worker.is_alive()
    assert done and "lost the lock on shop/test1" in str(done[0]) + lines.text
    # nothing was written after the lock changed hands: no rollback, no record, no release
    assert slot.images()["shop-web"] == "registry.example/shop:neverready"
    assert slot.statuses(app)[2] == "pending"
    assert lease(slot).spec.holderIdentity == OTHER
