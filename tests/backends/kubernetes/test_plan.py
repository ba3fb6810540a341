"""``shipway plan``: a diff against the live objects from a server-side dry run, Secret
values masked, nothing mutated."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lightkube.resources.apps_v1 import Deployment, ReplicaSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Secret, Service

from tests.backends.kubernetes.conftest import TOKEN, Slot

pytestmark = pytest.mark.k8s

NEW_TOKEN = "tok-22c1d0e7-also-never-print-me"


def versions(slot: Slot) -> dict[str, Any]:
    out = {}
    for res in (Deployment, ReplicaSet, Secret, Service, Lease):
        for obj in slot.client.list(res, namespace=slot.namespace):
            out[f"{res.__name__}/{obj.metadata.name}"] = obj.metadata.resourceVersion
    return out


def test_plan_diffs_live_objects_with_secret_values_masked_and_mutates_nothing(
    slot: Slot,
) -> None:
    slot.write()
    assert slot.cli("deploy", "test1").returncode == 0
    slot.edit('LOG_LEVEL = "info"', 'LOG_LEVEL = "debug"\nREGION = "eu"')
    before = versions(slot)

    result = slot.cli(
        "plan", "test1", "--image", "registry.example/shop:2", env={"SHOP_TOKEN": NEW_TOKEN}
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert TOKEN not in out + result.stderr and NEW_TOKEN not in out + result.stderr

    assert "update Deployment/shop-web" in out
    assert "~ Deployment/shop-web" in out
    assert "-        image: registry.example/shop:1" in out
    assert "+        image: registry.example/shop:2" in out
    # Secret data: keys only, values masked; a changed plain value is flagged
    assert "~ Secret/shop-env" in out
    assert "    ~ LOG_LEVEL: *** (changed)" in out
    assert "    + REGION: ***" in out
    assert "config hash" in out  # the new token value changes it, unseen
    assert "debug" not in out.split("~ Secret/shop-env")[1].split("~ ")[0]

    assert versions(slot) == before  # the dry run and diff changed nothing

    as_json = slot.cli(
        "plan", "test1", "-o", "json", "--image", "registry.example/shop:2",
        env={"SHOP_TOKEN": NEW_TOKEN},
    )  # fmt: skip
    doc = json.loads(as_json.stdout)
    assert any("~ Secret/shop-env" in line for line in doc["diff"])
    assert NEW_TOKEN not in as_json.stdout and TOKEN not in as_json.stdout


def test_plan_of_a_first_deploy_shows_new_objects_masked(slot: Slot) -> None:
    slot.write()
    result = slot.cli("plan", "test1")
    assert result.returncode == 0, result.stderr
    assert "+ Deployment/shop-web (new)" in result.stdout
    assert "+     TOKEN: '***'" in result.stdout
    assert TOKEN not in result.stdout
    assert slot.images() == {}
