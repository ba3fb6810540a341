"""One-off commands (``shipway run SLOT -- CMD``) in the deployed release's environment on
this backend: its env and exit code, the guard, a terminal, what is left behind."""

from __future__ import annotations

import signal
from pathlib import Path

from lightkube.resources.core_v1 import Pod

from shipway.backends.kubernetes import render
from tests.backends.kubernetes.conftest import TOKEN, Slot
from tests.backends.kubernetes.test_blue_green import (
    audited,
    index,
    is_op,
    operations,
    settled,
)
from tests.backends.kubernetes.test_release_phase import RUN_SPEC, cli
from tests.testenv.k8s import wait_for_all


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
