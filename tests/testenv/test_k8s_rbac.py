"""Least-privilege credentials: a ServiceAccount bound to a namespace-scoped Role."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lightkube import Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.apps_v1 import DeploymentSpec
from lightkube.models.core_v1 import Container, PodSpec, PodTemplateSpec
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node

from tests.testenv.k8s import HelmPeer, wait_for

pytestmark = pytest.mark.k8s


def web(name: str = "web") -> Deployment:
    labels = {"app": name}
    return Deployment(
        metadata=ObjectMeta(name=name),
        spec=DeploymentSpec(
            replicas=1,
            selector=LabelSelector(matchLabels=labels),
            template=PodTemplateSpec(
                metadata=ObjectMeta(labels=labels),
                spec=PodSpec(containers=[Container(name="app", image="web:1.0")]),
            ),
        ),
    )


def client_for(kubeconfig: Path) -> Client:
    return Client(KubeConfig.from_file(kubeconfig), field_manager="shipway-tests")


def forbidden(call: Callable[[], object]) -> None:
    with pytest.raises(ApiError) as error:
        call()
    assert error.value.status.code == 403, error.value.status


def test_service_account_deploys_in_its_namespace_only(
    k8s_client: Client,
    k8s_namespace: str,
    k8s_namespaces: Callable[[], str],
    mint_kubeconfig: Callable[..., Path],
) -> None:
    other = k8s_namespaces()
    kubeconfig = mint_kubeconfig(k8s_namespace)
    sa = client_for(kubeconfig)

    sa.create(web(), namespace=k8s_namespace)
    dep = wait_for(
        k8s_client,
        Deployment,
        "web",
        lambda d: d.status is not None and d.status.availableReplicas == 1,
        namespace=k8s_namespace,
    )
    assert dep.metadata is not None
    # The minted kubeconfig's context namespace is its own namespace.
    assert sa.get(Deployment, "web").metadata is not None

    forbidden(lambda: sa.create(web(), namespace=other))
    forbidden(lambda: sa.list(Deployment, namespace=other).__iter__().__next__())
    forbidden(lambda: list(sa.list(Node)))
    forbidden(lambda: sa.create(Namespace(metadata=ObjectMeta(name=f"{other}-x"))))


def test_narrow_rules(
    k8s_client: Client, k8s_namespace: str, mint_kubeconfig: Callable[..., Path]
) -> None:
    k8s_client.create(
        ConfigMap(metadata=ObjectMeta(name="settings"), data={"a": "1"}), namespace=k8s_namespace
    )
    kubeconfig = mint_kubeconfig(
        k8s_namespace,
        [PolicyRule(apiGroups=[""], resources=["configmaps"], verbs=["get", "list", "watch"])],
    )
    reader = client_for(kubeconfig)
    assert reader.get(ConfigMap, "settings", namespace=k8s_namespace).data == {"a": "1"}
    forbidden(lambda: reader.create(web(), namespace=k8s_namespace))
    forbidden(
        lambda: reader.create(ConfigMap(metadata=ObjectMeta(name="x")), namespace=k8s_namespace)
    )


def test_helm_with_least_privilege_kubeconfig(
    k8s_namespace: str, mint_kubeconfig: Callable[..., Path]
) -> None:
    limited = HelmPeer(mint_kubeconfig(k8s_namespace))
    release = limited.install("shop", k8s_namespace, wait=True, timeout=60)
    assert release["status"] == "deployed"
