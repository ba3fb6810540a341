"""The test control plane is a real Kubernetes: API server, controllers, scheduler, kwok."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.models.apps_v1 import DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import (
    Container,
    PodSpec,
    PodTemplateSpec,
    ResourceRequirements,
)
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import Deployment, ReplicaSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod, Secret

from tests.testenv.k8s import wait_for, wait_for_all

pytestmark = pytest.mark.k8s


def deployment(
    name: str, namespace: str, image: str, replicas: int, **pod_annotations: str
) -> Deployment:
    labels = {"app": name}
    return Deployment(
        metadata=ObjectMeta(name=name, namespace=namespace, labels=labels),
        spec=DeploymentSpec(
            replicas=replicas,
            selector=LabelSelector(matchLabels=labels),
            strategy=DeploymentStrategy(
                type="RollingUpdate",
                rollingUpdate=RollingUpdateDeployment(maxSurge=1, maxUnavailable=0),
            ),
            template=PodTemplateSpec(
                metadata=ObjectMeta(labels=labels, annotations=pod_annotations or None),
                spec=PodSpec(
                    containers=[
                        Container(
                            name="app",
                            image=image,
                            resources=ResourceRequirements(
                                requests={"cpu": "100m", "memory": "64Mi"}
                            ),
                        )
                    ]
                ),
            ),
        ),
    )


def available(replicas: int, generation: int | None = None) -> Callable[[Deployment], bool]:
    def check(d: Deployment) -> bool:
        s = d.status
        if s is None or d.metadata is None:
            return False
        conditions = {c.type: c for c in s.conditions or []}
        progressing = conditions.get("Progressing")
        return (
            (s.observedGeneration or 0) >= (generation or d.metadata.generation or 0)
            and s.replicas == replicas
            and s.updatedReplicas == replicas
            and s.readyReplicas == replicas
            and s.availableReplicas == replicas
            and not s.unavailableReplicas
            and conditions.get("Available") is not None
            and conditions["Available"].status == "True"
            and progressing is not None
            and progressing.reason == "NewReplicaSetAvailable"
        )

    return check


def test_nodes_are_ready_with_realistic_capacity(k8s_client: Client) -> None:
    nodes = list(k8s_client.list(Node, labels={"type": "kwok"}))  # not the real node
    assert len(nodes) >= 2
    for node in nodes:
        assert node.status is not None
        ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
        assert ready and ready[0].status == "True"
        assert node.status.allocatable is not None
        assert node.status.allocatable["cpu"] == "4"
        assert node.status.allocatable["memory"] == "8Gi"
        assert node.status.allocatable["pods"] == "110"


def test_deployment_becomes_available_with_expected_replicas(
    k8s_client: Client, k8s_namespace: str
) -> None:
    k8s_client.apply(deployment("web", k8s_namespace, "web:1.0", 3))
    d = wait_for(k8s_client, Deployment, "web", available(3), namespace=k8s_namespace, timeout=60)
    assert d.status is not None and d.status.availableReplicas == 3

    # The real ReplicaSet controller made one ReplicaSet owning three scheduled, ready pods.
    replica_sets = list(k8s_client.list(ReplicaSet, namespace=k8s_namespace))
    assert len(replica_sets) == 1
    assert replica_sets[0].metadata is not None
    owners = replica_sets[0].metadata.ownerReferences or []
    assert [(o.kind, o.name) for o in owners] == [("Deployment", "web")]
    pods = list(k8s_client.list(Pod, namespace=k8s_namespace, labels={"app": "web"}))
    assert len(pods) == 3
    for pod in pods:
        assert pod.spec is not None and pod.spec.nodeName in {"kwok-node-0", "kwok-node-1"}
        assert pod.status is not None and pod.status.phase == "Running"
        assert pod.status.podIP


def test_rolling_update_replaces_every_pod(k8s_client: Client, k8s_namespace: str) -> None:
    k8s_client.apply(deployment("web", k8s_namespace, "web:1.0", 2))
    wait_for(k8s_client, Deployment, "web", available(2), namespace=k8s_namespace)
    updated = k8s_client.apply(deployment("web", k8s_namespace, "web:2.0", 2))
    assert updated.metadata is not None
    wait_for(
        k8s_client,
        Deployment,
        "web",
        available(2, updated.metadata.generation),
        namespace=k8s_namespace,
    )

    def only_new_pods(pods: dict[str, Pod]) -> bool:
        images = {p.spec.containers[0].image for p in pods.values() if p.spec is not None}
        return len(pods) == 2 and images == {"web:2.0"}

    wait_for_all(
        k8s_client,
        Pod,
        only_new_pods,
        namespace=k8s_namespace,
        labels={"app": "web"},
        what="old pods to be deleted",
    )
    by_image = {
        rs.spec.template.spec.containers[0].image: rs.status.replicas
        for rs in k8s_client.list(ReplicaSet, namespace=k8s_namespace)
        if rs.spec and rs.spec.template and rs.spec.template.spec and rs.status
    }
    assert by_image == {"web:1.0": 0, "web:2.0": 2}


def test_failing_rollout_reports_progress_deadline_exceeded(
    k8s_client: Client, k8s_namespace: str
) -> None:
    d = deployment("web", k8s_namespace, "web:crashloop", 1)
    assert d.spec is not None
    d.spec.progressDeadlineSeconds = 3
    k8s_client.apply(d)

    def deadline_exceeded(dep: Deployment) -> bool:
        conditions = dep.status.conditions or [] if dep.status else []
        return any(
            (c.type, c.status, c.reason) == ("Progressing", "False", "ProgressDeadlineExceeded")
            for c in conditions
        )

    dep = wait_for(
        k8s_client, Deployment, "web", deadline_exceeded, namespace=k8s_namespace, timeout=60
    )
    assert dep.status is not None and not dep.status.availableReplicas


def test_server_side_apply_conflicts_and_validation_are_real(
    k8s_client: Client, k8s_namespace: str
) -> None:
    cm = ConfigMap(
        metadata=ObjectMeta(name="settings", namespace=k8s_namespace), data={"colour": "blue"}
    )
    k8s_client.apply(cm, field_manager="first")
    other = ConfigMap(
        metadata=ObjectMeta(name="settings", namespace=k8s_namespace), data={"colour": "red"}
    )
    with pytest.raises(ApiError) as conflict:
        k8s_client.apply(other, field_manager="second")
    assert conflict.value.status.code == 409
    k8s_client.apply(other, field_manager="second", force=True)
    got = k8s_client.get(ConfigMap, "settings", namespace=k8s_namespace)
    assert got.data == {"colour": "red"}

    invalid = deployment("Not_A_Valid_Name", k8s_namespace, "web:1.0", 1)
    with pytest.raises(ApiError) as rejected:
        k8s_client.create(invalid, namespace=k8s_namespace)
    assert rejected.value.status.code == 422


def test_leases_are_served(k8s_client: Client, k8s_namespace: str) -> None:
    lease = k8s_client.create(
        Lease(
            metadata=ObjectMeta(name="shipway-lock"),
            spec=LeaseSpec(holderIdentity="test", leaseDurationSeconds=15),
        ),
        namespace=k8s_namespace,
    )
    assert lease.metadata is not None and lease.spec is not None
    lease.metadata.namespace = k8s_namespace
    lease.spec.holderIdentity = "other"
    k8s_client.replace(lease)
    # `lease` still carries the old resourceVersion: optimistic concurrency refuses it.
    lease.spec.holderIdentity = "third"
    with pytest.raises(ApiError) as conflict:
        k8s_client.replace(lease)
    assert conflict.value.status.code == 409
    # kwok renews the simulated nodes' Leases like kubelets do.
    node_leases = {
        lease.metadata.name
        for lease in k8s_client.list(Lease, namespace="kube-node-lease")
        if lease.metadata is not None
    }
    assert {"kwok-node-0", "kwok-node-1"} <= node_leases


def test_namespace_with_pods_is_deleted(k8s_client: Client, k8s_namespace: str) -> None:
    k8s_client.apply(deployment("web", k8s_namespace, "web:1.0", 2))
    wait_for(k8s_client, Deployment, "web", available(2), namespace=k8s_namespace)
    k8s_client.delete(Namespace, k8s_namespace)
    # namespace controller deletes the pods; kwok completes their deletion.
    wait_for_all(
        k8s_client,
        Namespace,
        lambda seen: k8s_namespace not in seen,
        fields={"metadata.name": k8s_namespace},
        timeout=90,
        what="namespace deletion",
    )
    assert k8s_namespace not in {ns.metadata.name for ns in k8s_client.list(Namespace)}


def test_audit_log_records_requests(
    k8s_client: Client, k8s_namespace: str, k8s_audit_log: Path
) -> None:
    name = f"audit-{uuid.uuid4().hex[:8]}"
    k8s_client.create(ConfigMap(metadata=ObjectMeta(name=name)), namespace=k8s_namespace)
    k8s_client.get(ConfigMap, name, namespace=k8s_namespace)
    log = k8s_audit_log

    def recorded() -> set[tuple[str, str, str]]:
        seen = set()
        with log.open() as lines:
            for line in lines:
                if name in line:
                    event = json.loads(line)
                    if event.get("objectRef", {}).get("name") == name:
                        seen.add((event["verb"], event["stage"], event["level"]))
        return seen

    # The API server writes an event when a request completes; give it a moment.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(recorded()) < 2:
        time.sleep(0.1)
    assert recorded() >= {
        ("create", "ResponseComplete", "Metadata"),
        ("get", "ResponseComplete", "Metadata"),
    }


def test_garbage_collector_deletes_dependents(k8s_client: Client, k8s_namespace: str) -> None:
    k8s_client.apply(deployment("web", k8s_namespace, "web:1.0", 2))
    wait_for(k8s_client, Deployment, "web", available(2), namespace=k8s_namespace)
    k8s_client.delete(Deployment, "web", namespace=k8s_namespace)
    wait_for_all(
        k8s_client,
        ReplicaSet,
        lambda seen: not seen,
        namespace=k8s_namespace,
        what="the garbage collector to delete the ReplicaSet",
    )
    wait_for_all(
        k8s_client,
        Pod,
        lambda seen: not seen,
        namespace=k8s_namespace,
        what="the pods to be deleted",
    )
    assert list(k8s_client.list(ReplicaSet, namespace=k8s_namespace)) == []
    assert list(k8s_client.list(Pod, namespace=k8s_namespace)) == []


def test_service_account_token_controller_fills_token_secrets(
    k8s_client: Client, k8s_namespace: str
) -> None:
    k8s_client.create(
        Secret(
            metadata=ObjectMeta(
                name="legacy-token",
                namespace=k8s_namespace,
                annotations={"kubernetes.io/service-account.name": "default"},
            ),
            type="kubernetes.io/service-account-token",
        )
    )
    secret = wait_for(
        k8s_client,
        Secret,
        "legacy-token",
        lambda s: bool(s.data and "token" in s.data),
        namespace=k8s_namespace,
    )
    assert secret.data is not None and {"ca.crt", "namespace", "token"} <= set(secret.data)


def test_every_component_collects_garbage_less_often(k8s_client: Client) -> None:
    """`k8s-testenv up` starts each component with the Go collector at 400 (DAEMON_ENV:
    kube-apiserver spent a third of its CPU collecting at Go's default)."""
    configured = os.environ.get("SHIPWAY_TEST_K8S_DIR")
    if not configured:
        pytest.skip("$SHIPWAY_TEST_K8S_DIR is not set: no record of the plane's processes")
    records = sorted((Path(configured) / "run").glob("*.json"))
    assert {"etcd", "kube-apiserver", "kube-controller-manager"} <= {r.stem for r in records}
    for record in records:
        pid = json.loads(record.read_text())["pid"]
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"GOGC=400" in environ, record.stem
