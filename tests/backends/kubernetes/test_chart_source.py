"""A slot whose objects come from a Helm chart, and objects Helm already owns.

With helm-python-sdk (the ``shipway[helm]`` extra) a chart is rendered in-process by Helm's
own Go SDK and applied like manifests: the objects shipway applies match, field for field,
those Helm itself installs from the same chart and values (Helm's and shipway's own labels
and annotations aside). Without it (the module blocked in a subprocess) the chart is a
declaration: compared with the live Helm release, and a deploy refuses with the fix. An
object a Helm release (or another tool) owns is refused without ``--take-over``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import Any

import pytest
import yaml
from lightkube.codecs import from_dict
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Secret, Service

from shipway.engine.outcome import Rolled
from shipway.spec.source import merge_values
from tests.backends.kubernetes.conftest import BASE_ENV, Slot
from tests.testenv.k8s import CHARTS_DIR, HelmPeer

pytestmark = pytest.mark.k8s

STACK = CHARTS_DIR / "stack"
VALUES = STACK / "values-prod.yaml"
RELEASE = "shop"

CHART_SPEC = """
[app]
name = "shop"

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"

[slots.test1.source]
chart = "{chart}"
release = "{release}"
values = ["{values}"]
set = {{ "config.level" = "debug" }}
"""
OWN_PREFIXES = ("shipway.io/", "meta.helm.sh/")
OWN_KEYS = ("app.kubernetes.io/managed-by", "deployment.kubernetes.io/revision")
#: what the chart and values give the Helm peer: the values file, then ``set``
USER_VALUES = merge_values(yaml.safe_load(VALUES.read_text()), {"config": {"level": "debug"}})


def chart_spec(slot: Slot, **values: str) -> Any:
    values.setdefault("chart", str(STACK))
    values.setdefault("release", RELEASE)
    values.setdefault("values", str(VALUES))
    return slot.write(CHART_SPEC, **values)


def _mine(mapping: dict[str, Any] | None) -> dict[str, Any]:
    return {
        k: v
        for k, v in (mapping or {}).items()
        if not k.startswith(OWN_PREFIXES) and k not in OWN_KEYS
    }


def comparable(obj: Any) -> dict[str, Any]:
    """An object as a chart made it: what the cluster adds (ids, times, status, allocated
    addresses) and what each tool marks its objects with taken out."""
    d = copy.deepcopy(obj.to_dict())
    d.pop("status", None)
    meta = d["metadata"]
    d["metadata"] = {
        "name": meta["name"],
        "labels": _mine(meta.get("labels")),
        "annotations": _mine(meta.get("annotations")),
    }
    template = (d.get("spec") or {}).get("template")
    if template and template.get("metadata"):
        tmeta = template["metadata"]
        tmeta["labels"] = _mine(tmeta.get("labels"))
        tmeta["annotations"] = _mine(tmeta.get("annotations"))
        if not tmeta["annotations"]:
            tmeta.pop("annotations")
    if d["kind"] == "Service":
        for key in ("clusterIP", "clusterIPs"):
            d["spec"].pop(key, None)
    return d


def objects(slot: Slot, namespace: str) -> dict[str, dict[str, Any]]:
    out = {}
    for kind in (ConfigMap, Deployment, Service, StatefulSet):
        for obj in slot.client.list(kind, namespace=namespace):
            if kind is ConfigMap and obj.metadata.name == "kube-root-ca.crt":
                continue
            out[f"{obj.kind}/{obj.metadata.name}"] = comparable(obj)
    return out


def cli_without_helm(slot: Slot, *args: str) -> subprocess.CompletedProcess[str]:
    """``shipway`` in a subprocess where ``import helm_python`` fails, as without the
    extra (the package stays installed for every other test)."""
    blocked = (
        "import sys; sys.modules['helm_python'] = None; "
        "from shipway.cli.main import main; sys.argv[0] = 'shipway'; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", blocked, "-f", str(slot.spec_file), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **BASE_ENV, "KUBECONFIG": str(slot.kubeconfig)},
        timeout=240,
        check=False,
    )


def test_a_chart_deploys_the_objects_helm_itself_installs(
    slot: Slot, helm: HelmPeer, k8s_namespaces: Any
) -> None:
    app = chart_spec(slot)
    planned = slot.cli("plan", "test1")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "stack/templates/tests/test-connection.yaml#1: Pod/shop-stack-test is a Helm hook" in (
        planned.stdout
    )
    assert "create StatefulSet/shop-cache" in planned.stdout
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    # the hook is left out, said so; the subchart's StatefulSet and the worker its
    # condition turned on are in
    assert "stack-test is a Helm hook (test): not run" in lines.text
    assert "wait until StatefulSet/shop-cache is ready" in lines.text
    assert "wait until Deployment/shop-stack-worker is ready" in lines.text

    peer = k8s_namespaces()
    helm.install(RELEASE, peer, chart=STACK, values=USER_VALUES, wait=True)
    ours, helms = objects(slot, slot.namespace), objects(slot, peer)
    assert (
        set(ours)
        == set(helms)
        == {
            "ConfigMap/shop-stack-config",
            "Deployment/shop-stack-web",
            "Deployment/shop-stack-worker",
            "Service/shop-stack-web",
            "StatefulSet/shop-cache",
        }
    )
    for key in ours:
        assert ours[key] == helms[key], key
    # the values took: the file's replicas, set's level, the subchart's own replicas
    assert ours["Deployment/shop-stack-web"]["spec"]["replicas"] == 3
    assert ours["StatefulSet/shop-cache"]["spec"]["replicas"] == 2
    config = slot.client.get(ConfigMap, "shop-stack-config", namespace=slot.namespace)
    assert config.data == {"greeting": "hi from prod", "level": "debug"}
    # shipway's release, not a Helm release: no Helm record in the slot's namespace
    assert not helm.list(slot.namespace)


def test_without_the_extra_the_chart_is_compared_and_a_deploy_refused(
    slot: Slot, helm: HelmPeer
) -> None:
    helm.install(RELEASE, slot.namespace, chart=STACK, values=USER_VALUES)
    chart_spec(slot)

    same = cli_without_helm(slot, "plan", "test1")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "nothing to do: all 1 objects are up to date" in same.stdout
    assert "compared, not rendered" in same.stdout

    status = cli_without_helm(slot, "status", "test1", "-o", "json")
    assert status.returncode == 0, status.stderr
    [chart] = json.loads(status.stdout)["processes"]
    assert chart["process"] == "helm release shop"
    assert (chart["declared"], chart["drift"]) == ("stack-0.3.0", "none")
    assert chart["live"] == "stack-0.3.0 (revision 1)"

    slot.edit('set = { "config.level" = "debug" }', 'set = { "config.level" = "warn" }')
    drift = cli_without_helm(slot, "plan", "test1")
    assert drift.returncode == 0, drift.stdout + drift.stderr
    assert "update HelmRelease/shop" in drift.stdout
    assert "-    level: debug" in drift.stdout and "+    level: warn" in drift.stdout
    status = cli_without_helm(slot, "status", "test1", "-o", "json")
    assert json.loads(status.stdout)["processes"][0]["drift"] == "values"

    refused = cli_without_helm(slot, "deploy", "test1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "can only be compared here, not rendered" in refused.stderr
    assert "pip install 'shipway[helm]'" in refused.stderr
    # nothing touched: no lock taken, no record written
    assert not list(slot.client.list(Lease, namespace=slot.namespace))
    assert not list(slot.client.list(Secret, namespace=slot.namespace, labels={"owner": "shipway"}))


LEGACY = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: legacy
spec:
  replicas: 1
  selector:  # the demo chart's own selector (a Deployment's selector cannot change)
    matchLabels: {app.kubernetes.io/name: demo, app.kubernetes.io/instance: legacy}
  template:
    metadata:
      labels: {app.kubernetes.io/name: demo, app.kubernetes.io/instance: legacy}
    spec:
      containers:
        - name: app
          image: registry.example/legacy:2
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: hand-made
data:
  made: by hand
"""

MANIFESTS_SPEC = """
[app]
name = "shop"

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"

[slots.test1.source]
manifests = ["k8s/"]
"""


def test_objects_of_a_helm_release_are_refused_without_take_over(
    slot: Slot, helm: HelmPeer
) -> None:
    helm.install("legacy", slot.namespace, chart="demo", wait=True)
    slot.client.create(
        from_dict(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "hand-made", "namespace": slot.namespace},
                "data": {"made": "by kubectl"},
            }
        ),
        field_manager="kubectl-create",
    )
    (slot.directory / "k8s").mkdir()
    (slot.directory / "k8s" / "app.yaml").write_text(LEGACY)
    slot.write(MANIFESTS_SPEC)

    refused = slot.cli("deploy", "test1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"Deployment/legacy: Helm release legacy (namespace {slot.namespace})" in refused.stderr
    assert "ConfigMap/hand-made: field manager kubectl-create" in refused.stderr
    assert "--take-over" in refused.stderr
    before = slot.client.get(Deployment, "legacy", namespace=slot.namespace)
    assert before.spec.template.spec.containers[0].image == "demo-app:1.0"

    planned = slot.cli("plan", "test1", "--take-over")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "taking over Deployment/legacy from Helm release legacy" in planned.stdout

    taken = slot.cli("deploy", "test1", "--take-over")
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert "taking over Deployment/legacy from Helm release legacy" in taken.stdout
    assert "taking over ConfigMap/hand-made from field manager kubectl-create" in taken.stdout
    after = slot.client.get(Deployment, "legacy", namespace=slot.namespace)
    assert after.spec.template.spec.containers[0].image == "registry.example/legacy:2"
    assert after.status.availableReplicas == 1
    notes = after.metadata.annotations or {}
    assert not [k for k in notes if k.startswith("meta.helm.sh/")]  # Helm lets go of it
    assert after.metadata.labels["app.kubernetes.io/managed-by"] == "shipway"
    made = slot.client.get(ConfigMap, "hand-made", namespace=slot.namespace)
    assert made.data == {"made": "by hand"}

    # taken: the next deploy has nothing to refuse
    again = slot.cli("deploy", "test1")
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_saved_plan_asks_again_whose_objects_are_whose(slot: Slot, helm: HelmPeer) -> None:
    (slot.directory / "k8s").mkdir()
    (slot.directory / "k8s" / "app.yaml").write_text(LEGACY.split("---")[0])
    slot.write(MANIFESTS_SPEC)
    saved = slot.directory / "plan.json"
    made = slot.cli("plan", "test1", "--out", str(saved))
    assert made.returncode == 0, made.stdout + made.stderr
    # between the plan and its deploy, a Helm release takes the name
    helm.install("legacy", slot.namespace, chart="demo")
    refused = slot.cli("deploy", "test1", "--plan", str(saved))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Deployment/legacy: Helm release legacy" in refused.stderr
    taken = slot.cli("deploy", "test1", "--plan", str(saved), "--take-over")
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert "taking over Deployment/legacy from Helm release legacy" in taken.stdout
    live = slot.client.get(Deployment, "legacy", namespace=slot.namespace)
    assert live.spec.template.spec.containers[0].image == "registry.example/legacy:2"
