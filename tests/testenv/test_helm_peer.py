"""Real Helm releases (helm-python-sdk: Helm's Go SDK, no binary) in the test cluster."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable

import pytest
from lightkube import Client
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Secret, Service

from tests.testenv.k8s import HelmPeer, wait_for

pytestmark = pytest.mark.k8s


def release_secrets(client: Client, namespace: str, name: str) -> dict[str, Secret]:
    secrets = client.list(Secret, namespace=namespace, labels={"owner": "helm", "name": name})
    return {s.metadata.name: s for s in secrets if s.metadata is not None and s.metadata.name}


def decode_release(secret: Secret) -> dict[str, object]:
    """Helm stores a release as base64(gzip(json)) inside the Secret's base64 data."""
    assert secret.data is not None
    raw = base64.b64decode(base64.b64decode(secret.data["release"]))
    decoded: dict[str, object] = json.loads(gzip.decompress(raw))
    return decoded


def deployment_ready(replicas: int) -> Callable[[Deployment], bool]:
    def check(d: Deployment) -> bool:
        s = d.status
        return s is not None and s.readyReplicas == replicas and s.updatedReplicas == replicas

    return check


def test_install_creates_release_secret_and_resources(
    helm: HelmPeer, k8s_client: Client, k8s_namespace: str
) -> None:
    release = helm.install(
        "shop", k8s_namespace, values={"replicas": 2, "message": "hi"}, wait=True, timeout=60
    )
    assert release["status"] == "deployed" and release["revision"] == 1
    assert release["chart_name"] == "demo"

    secrets = release_secrets(k8s_client, k8s_namespace, "shop")
    assert list(secrets) == ["sh.helm.release.v1.shop.v1"]
    secret = secrets["sh.helm.release.v1.shop.v1"]
    assert secret.type == "helm.sh/release.v1"
    assert secret.metadata is not None and secret.metadata.labels is not None
    labels = secret.metadata.labels
    assert labels["owner"] == "helm"
    assert labels["name"] == "shop"
    assert labels["status"] == "deployed"
    assert labels["version"] == "1"
    stored = decode_release(secret)
    assert stored["name"] == "shop" and stored["version"] == 1

    wait_for(k8s_client, Deployment, "shop", deployment_ready(2), namespace=k8s_namespace)
    cm = k8s_client.get(ConfigMap, "shop-config", namespace=k8s_namespace)
    assert cm.data == {"message": "hi"}
    svc = k8s_client.get(Service, "shop", namespace=k8s_namespace)
    assert svc.spec is not None and svc.spec.clusterIP


def test_upgrade_and_rollback(helm: HelmPeer, k8s_client: Client, k8s_namespace: str) -> None:
    helm.install("shop", k8s_namespace, values={"message": "v1"}, wait=True)
    upgraded = helm.upgrade(
        "shop", k8s_namespace, values={"message": "v2", "image": "demo-app:2.0"}, wait=True
    )
    assert upgraded["revision"] == 2
    cm = k8s_client.get(ConfigMap, "shop-config", namespace=k8s_namespace)
    assert cm.data == {"message": "v2"}

    helm.rollback("shop", k8s_namespace, revision=1, wait=True)
    history = helm.history("shop", k8s_namespace)
    assert [(r["revision"], r["status"]) for r in history] == [
        (1, "superseded"),
        (2, "superseded"),
        (3, "deployed"),
    ]
    cm = k8s_client.get(ConfigMap, "shop-config", namespace=k8s_namespace)
    assert cm.data == {"message": "v1"}
    dep = wait_for(k8s_client, Deployment, "shop", deployment_ready(2), namespace=k8s_namespace)
    assert dep.spec is not None and dep.spec.template.spec is not None
    assert dep.spec.template.spec.containers[0].image == "demo-app:1.0"

    secrets = release_secrets(k8s_client, k8s_namespace, "shop")
    assert sorted(secrets) == [f"sh.helm.release.v1.shop.v{n}" for n in (1, 2, 3)]
    statuses = {
        name: (s.metadata.labels or {}).get("status")
        for name, s in secrets.items()
        if s.metadata is not None
    }
    assert statuses["sh.helm.release.v1.shop.v3"] == "deployed"
    assert statuses["sh.helm.release.v1.shop.v1"] == "superseded"


def test_two_charts_in_one_namespace(
    helm: HelmPeer, k8s_client: Client, k8s_namespace: str
) -> None:
    helm.install("frontend", k8s_namespace, chart="demo", wait=True)
    helm.install("jobs", k8s_namespace, chart="worker", values={"replicas": 2}, wait=True)
    releases = {r["name"]: r for r in helm.list(k8s_namespace)}
    assert {name: r["chart_name"] for name, r in releases.items()} == {
        "frontend": "demo",
        "jobs": "worker",
    }
    assert releases["jobs"]["chart_version"] == "0.2.0"
    wait_for(k8s_client, Deployment, "jobs", deployment_ready(2), namespace=k8s_namespace)
    helm.uninstall("frontend", k8s_namespace)
    assert not release_secrets(k8s_client, k8s_namespace, "frontend")
    assert [r["name"] for r in helm.list(k8s_namespace)] == ["jobs"]
