"""A deploy by a namespace-scoped ServiceAccount bound to the Role documented in
docs/kubernetes.md (read from the page, so the documentation is what is tested)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backends.kubernetes.conftest import TOKEN, Slot

pytestmark = pytest.mark.k8s

DOC = Path(__file__).resolve().parents[3] / "docs" / "kubernetes.md"


def documented(kind: str) -> dict[str, Any]:
    """The first ``kind`` object in a YAML block of docs/kubernetes.md."""
    for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and doc.get("kind") == kind:
            return doc
    raise AssertionError(f"no {kind} in {DOC}")


def documented_role() -> dict[str, Any]:
    return documented("Role")


def test_the_documented_role_has_no_cluster_wide_or_wildcard_rights() -> None:
    role = documented_role()
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "namespaces" not in rule["resources"]
    # the optional cluster-wide one only lists Ingresses (who serves a host)
    lookup = documented("ClusterRole")
    assert lookup["rules"] == [
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": ["list"]}
    ]


def test_a_namespace_scoped_service_account_deploys_fails_fast_and_rolls_back(
    slot: Slot, mint_kubeconfig: Callable[..., Path]
) -> None:
    kubeconfig = mint_kubeconfig(slot.namespace, documented_role()["rules"], name="deployer")
    slot.write()
    env = {"KUBECONFIG": str(kubeconfig)}

    plan = slot.cli("plan", "test1", env=env)
    assert plan.returncode == 0, plan.stderr
    assert "Namespace/" not in plan.stdout  # it cannot read it, and does not try to change it

    first = slot.cli("deploy", "test1", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "rolled shop/test1 from nothing to r1" in first.stdout

    doomed = slot.cli("deploy", "test1", "--image", "registry.example/shop:crashloop", env=env)
    out = doomed.stdout + doomed.stderr
    assert doomed.returncode == 10, out
    assert "CrashLoopBackOff" in out and "event Warning BackOff" in out
    assert TOKEN not in out

    again = slot.cli("deploy", "test1", "--image", "registry.example/shop:2", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert slot.images()["shop-web"] == "registry.example/shop:2"


def test_the_documented_role_destroys_a_slot(
    slot: Slot, mint_kubeconfig: Callable[..., Path]
) -> None:
    """The Role holds no right on the Gateway API's routes (a canary slot's): destroy, which
    also looks for a canary slot's HTTPRoutes where the cluster serves them, still runs."""
    kubeconfig = mint_kubeconfig(slot.namespace, documented_role()["rules"], name="deployer")
    slot.write()
    env = {"KUBECONFIG": str(kubeconfig)}
    first = slot.cli("deploy", "test1", env=env)
    assert first.returncode == 0, first.stdout + first.stderr

    done = slot.cli("destroy", "test1", "--confirm", "test1", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deleted Deployment shop-web" in done.stdout, done.stdout
    assert slot.images() == {}
