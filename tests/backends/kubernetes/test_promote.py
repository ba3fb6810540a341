"""``shipway promote test1``: the digest test1 runs, checked live, rolled to prod (another
namespace) under prod's guard."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lightkube.resources.apps_v1 import Deployment

from tests.backends.kubernetes.conftest import SHOP, Slot

pytestmark = pytest.mark.k8s

DIGEST = "sha256:" + "3c" * 32
OTHER = "sha256:" + "d9" * 32

PROD = """
promotes_to = "prod"

[slots.prod]
backend = "kubernetes"
namespace = "{prod}"
role = "production"
"""


def test_promote_rolls_the_tested_digest_to_the_next_slot(
    slot: Slot, k8s_namespaces: Callable[[], str]
) -> None:
    prod = k8s_namespaces()
    app = slot.write(SHOP.replace("{slot_extra}", PROD.replace("{prod}", prod)))
    tested = f"registry.example/shop:1@{DIGEST}"
    assert slot.cli("deploy", "test1", "--image", tested).returncode == 0
    assert slot.records(app)[1].digest == DIGEST

    refused = slot.cli("promote", "test1")
    assert refused.returncode == 3 and "--confirm prod" in refused.stderr

    result = slot.cli("promote", "test1", "--confirm", "prod")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rolled shop/prod from nothing to r1" in result.stdout
    live = slot.client.get(Deployment, "shop-web", namespace=prod)
    assert live.spec.template.spec.containers[0].image == f"registry.example/shop@{DIGEST}"
    promoted = slot.records(app, "prod")[1]
    assert promoted.digest == DIGEST
    assert promoted.description == f"promote test1 r1 (registry.example/shop@{DIGEST})"


def test_promote_refuses_when_the_live_digest_is_not_the_recorded_one(
    slot: Slot, k8s_namespaces: Callable[[], str]
) -> None:
    prod = k8s_namespaces()
    slot.write(SHOP.replace("{slot_extra}", PROD.replace("{prod}", prod)))
    assert slot.cli("deploy", "test1", "--image", f"registry.example/shop@{DIGEST}").returncode == 0
    # Someone changed what runs behind shipway's back.
    web = slot.deployment("shop-web")
    web.spec.template.spec.containers[0].image = f"registry.example/shop@{OTHER}"
    slot.client.replace(web)

    result = slot.cli("promote", "test1", "--confirm", "prod")
    assert result.returncode == 2
    assert f"recorded with {DIGEST} but {OTHER} is running there" in result.stderr
    assert list(slot.client.list(Deployment, namespace=prod)) == []
