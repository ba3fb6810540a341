"""Two apps sharing a namespace whose objects would be given one name (``shop`` +
``web-api`` and ``shop-web`` + ``api`` are both ``shop-web-api``): the second is refused
before anything is written, naming the object and its owner — never overwriting it."""

from __future__ import annotations

import pytest
from lightkube.resources.apps_v1 import Deployment

from tests.backends.kubernetes.conftest import Slot
from tests.backends.kubernetes.test_volumes import storage_class  # noqa: F401  (a fixture)

pytestmark = pytest.mark.k8s

APP = """
[app]
name = "{name}"
image = "registry.example/shop:1"
image_type = "dockerfile"

[processes.{process}]
command = "serve"
port = 8000

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"
"""


def test_a_name_another_app_holds_in_the_namespace_is_refused(slot: Slot) -> None:
    first = Slot(slot.directory / "shop-web", slot.namespace, slot.kubeconfig, slot.client)
    first.directory.mkdir()
    first.write(APP, name="shop-web", process="api")
    assert first.cli("deploy", "test1").returncode == 0
    theirs = slot.client.get(Deployment, "shop-web-api", namespace=slot.namespace)

    slot.write(APP, name="shop", process="web-api")
    for command in (("plan", "test1"), ("deploy", "test1")):
        refused = slot.cli(*command)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert (
            "Deployment shop-web-api (for its process 'web-api') is app shop-web's, slot test1"
            in refused.stderr
        ), refused.stderr
        assert "hint: rename the process" in refused.stderr
    after = slot.client.get(Deployment, "shop-web-api", namespace=slot.namespace)
    assert after.metadata.resourceVersion == theirs.metadata.resourceVersion  # untouched
    assert after.metadata.labels["app.kubernetes.io/name"] == "shop-web"
    assert first.cli("deploy", "test1").returncode == 0  # the owner deploys on as before


def test_a_claim_name_another_app_holds_in_the_namespace_is_refused(
    slot: Slot,
    storage_class: str,  # noqa: F811  (the fixture imported above)
) -> None:
    from lightkube.resources.core_v1 import PersistentVolumeClaim

    volume = (
        '\n[volumes.{volume}]\npath = "/data"\nsize = "1Gi"\n'
        f'storage_class = "{storage_class}"\n'
    )
    first = Slot(slot.directory / "shop-web", slot.namespace, slot.kubeconfig, slot.client)
    first.directory.mkdir()
    first.write(APP + volume.format(volume="data"), name="shop-web", process="api")
    assert first.cli("deploy", "test1").returncode == 0
    theirs = slot.client.get(PersistentVolumeClaim, "shop-web-data", namespace=slot.namespace)

    slot.write(APP + volume.format(volume="web-data"), name="shop", process="web")
    refused = slot.cli("deploy", "test1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        "PersistentVolumeClaim shop-web-data (for its volume 'web-data') is app shop-web's"
        in refused.stderr
    ), refused.stderr
    after = slot.client.get(PersistentVolumeClaim, "shop-web-data", namespace=slot.namespace)
    assert after.metadata.resourceVersion == theirs.metadata.resourceVersion  # untouched
