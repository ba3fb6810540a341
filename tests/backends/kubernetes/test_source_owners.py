"""Whose objects a source slot may prune or rewrite, on the real control plane (invariant 14).

What a slot deletes or rewrites is what its own records list as applied, for that slot:
app, slot and namespace together. Labels alike are not enough — two slots of the same app
and slot name in two namespaces share them, and anyone can copy them onto an object. A
field another manager added is not drift on a source slot, as on a processes slot.
"""

from __future__ import annotations

import textwrap
from contextlib import suppress
from typing import Any

import pytest
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap, Service
from lightkube.resources.rbac_authorization_v1 import ClusterRole
from lightkube.types import PatchType

from shipway import api
from shipway.engine.outcome import Rolled, Unchanged
from tests.backends.kubernetes.conftest import Slot
from tests.backends.kubernetes.test_chart_source import LEGACY, MANIFESTS_SPEC
from tests.backends.kubernetes.test_sources import base, deploy, spec, write
from tests.testenv.k8s import HelmPeer

pytestmark = pytest.mark.k8s

ROLE = """
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {name}
rules:
  - apiGroups: [""]
    resources: [{resource}]
    verbs: [get]
"""
ROLES_SPEC = spec("Deployment/web:app").replace(
    'cluster_scoped = ["CustomResourceDefinition"]', 'cluster_scoped = ["ClusterRole"]'
)


def role(name: str, resource: str) -> str:
    return textwrap.dedent(ROLE).format(name=name, resource=resource)


@pytest.fixture
def roles(k8s_client: Any) -> Any:
    """Names of ClusterRoles a test makes, deleted after it (no namespace holds them)."""
    made: list[str] = []
    yield made
    for name in made:
        with suppress(ApiError):
            k8s_client.delete(ClusterRole, name)


def test_a_cluster_scoped_object_belongs_to_the_slot_of_one_namespace(
    slot: Slot, k8s_namespaces: Any, roles: list[str]
) -> None:
    # the same app and slot names, in another namespace (another team's copy of the spec)
    other = Slot(slot.directory / "other", k8s_namespaces(), slot.kubeconfig, slot.client)
    other.directory.mkdir()
    theirs, ours = f"reader-{slot.namespace}", f"reader-{other.namespace}"
    roles += [theirs, ours]
    a = write(slot, {"app.yaml": base() + role(theirs, "configmaps")}, ROLES_SPEC)
    outcome, lines = deploy(slot, a)
    assert isinstance(outcome, Rolled), lines.text
    b = write(other, {"app.yaml": base() + role(ours, "secrets")}, ROLES_SPEC)
    outcome, lines = deploy(other, b)
    assert isinstance(outcome, Rolled), lines.text
    live = slot.client.get(ClusterRole, ours)
    assert live.metadata.labels["shipway.io/namespace"] == other.namespace

    # B deploys a change of its own: A's ClusterRole is not B's to prune
    changed = base().replace("greeting: hello", "greeting: bonjour") + role(ours, "secrets")
    b = write(other, {"app.yaml": changed}, ROLES_SPEC)
    outcome, lines = deploy(other, b)
    assert isinstance(outcome, Rolled), lines.text
    assert theirs not in lines.text
    assert slot.client.get(ClusterRole, theirs).rules[0].resources == ["configmaps"]

    # B's source names A's ClusterRole: refused, naming its owner; A's rules stay
    b = write(other, {"app.yaml": changed + role(theirs, "secrets")}, ROLES_SPEC)
    refused = other.cli("deploy", "test1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        f"ClusterRole/{theirs}: shipway app shop slot test1 of namespace {slot.namespace}"
        in refused.stderr
    )
    assert slot.client.get(ClusterRole, theirs).rules[0].resources == ["configmaps"]
    # A itself goes on owning it
    again = slot.cli("deploy", "test1")
    assert again.returncode == 0, again.stdout + again.stderr
    other.close()


def test_prune_deletes_only_what_the_slot_applied(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base()})
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    # someone makes an object that carries the slot's labels; shipway never applied it
    slot.client.create(
        from_dict(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "look-alike",
                    "namespace": slot.namespace,
                    "labels": {
                        "shipway.io/app": "shop",
                        "shipway.io/slot": "test1",
                        "app.kubernetes.io/managed-by": "shipway",
                    },
                },
                "data": {"made": "by hand"},
            }
        ),
        field_manager="kubectl-create",
    )
    app = write(slot, {"app.yaml": base().replace("greeting: hello", "greeting: bonjour")})
    plan = api.plan(app, "test1", backend=slot.backend(app))
    assert "ConfigMap/look-alike" not in [getattr(s, "unit", None) for s in plan.steps]
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    assert "look-alike" not in lines.text
    kept = slot.client.get(ConfigMap, "look-alike", namespace=slot.namespace)
    assert kept.data == {"made": "by hand"}
    # and the source naming it later does not take it silently: its manager is named
    extra = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: look-alike\ndata: {a: b}\n"
    write(slot, {"app.yaml": base() + extra})
    refused = slot.cli("deploy", "test1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "ConfigMap/look-alike: field manager kubectl-create" in refused.stderr


def test_a_field_another_manager_added_is_not_drift(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base()})
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    # ``kubectl set env``: another field manager adds a variable shipway never set
    slot.client.patch(
        Deployment,
        "web",
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "app", "env": [{"name": "ADDED_BY_HAND", "value": "1"}]}
                        ]
                    }
                }
            }
        },
        namespace=slot.namespace,
        patch_type=PatchType.STRATEGIC,
        field_manager="kubectl-set",
    )
    plan = api.plan(app, "test1", backend=slot.backend(app))
    assert plan.unchanged, plan.describe()
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Unchanged), lines.text
    assert slot.statuses(app) == {1: "deployed"}  # no revision for nothing
    env = slot.deployment("web").spec.template.spec.containers[0].env
    assert [(e.name, e.value) for e in env or []] == [("ADDED_BY_HAND", "1")]
    # a field shipway set, changed by another manager, is drift: the deploy puts it back
    slot.client.patch(
        ConfigMap,
        "web-config",
        {"data": {"greeting": "edited by hand"}},
        namespace=slot.namespace,
        field_manager="kubectl-edit",
    )
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    live = slot.client.get(ConfigMap, "web-config", namespace=slot.namespace)
    assert live.data == {"greeting": "hello"}


# -- taking objects over from a Helm release ---------------------------------------------

TAKEN_SERVICE = """
---
apiVersion: v1
kind: Service
metadata:
  name: legacy
spec:
  selector: {app.kubernetes.io/name: demo, app.kubernetes.io/instance: legacy}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: legacy-config
data:
  message: taken
"""


def legacy_source(slot: Slot, extra: str = "", records: str = "") -> None:
    manifests = slot.directory / "k8s"
    manifests.mkdir(exist_ok=True)
    (manifests / "app.yaml").write_text(LEGACY.split("---")[0] + extra)
    spec_text = MANIFESTS_SPEC + (f'helm_records = "{records}"\n' if records else "")
    slot.write(spec_text)


def gone(slot: Slot, kind: Any, name: str) -> bool:
    try:
        slot.client.get(kind, name, namespace=slot.namespace)
    except ApiError as exc:
        return exc.status.code == 404
    return False


def test_take_over_marks_the_helm_release_superseded_so_helm_cannot_delete_them(
    slot: Slot, helm: HelmPeer
) -> None:
    helm.install("legacy", slot.namespace, chart="demo", wait=True)
    legacy_source(slot)  # the Deployment only: Helm keeps its Service and ConfigMap
    planned = slot.cli("plan", "test1", "--take-over")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    said = (
        f"Helm release legacy (namespace {slot.namespace}): its records will be marked "
        "superseded and revision 1 no longer lists the 1 object taken"
    )
    assert said in planned.stdout
    assert "it still holds" in planned.stdout and "Service/legacy" in planned.stdout
    # a plan changes nothing
    assert [r["status"] for r in helm.list(slot.namespace)] == ["deployed"]

    taken = slot.cli("deploy", "test1", "--take-over")
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert "marked superseded" in taken.stdout
    # `helm list` shows a release whose records include a deployed (or failed) one: none
    # is left (`helm list --all`, as the peer lists, shows it superseded)
    assert [r["status"] for r in helm.list(slot.namespace)] == ["superseded"]
    statuses = [r["status"] for r in helm.history("legacy", slot.namespace)]
    assert statuses == ["superseded"]

    # helm uninstall deletes what Helm still holds, never what shipway took
    helm.uninstall("legacy", slot.namespace)
    live = slot.deployment("legacy")
    assert live.spec.template.spec.containers[0].image == "registry.example/legacy:2"
    assert live.metadata.deletionTimestamp is None
    assert gone(slot, Service, "legacy")
    assert helm.list(slot.namespace) == []
    again = slot.cli("deploy", "test1")
    assert again.returncode == 0, again.stdout + again.stderr


def test_take_over_with_helm_records_removed_deletes_the_release_records(
    slot: Slot, helm: HelmPeer
) -> None:
    helm.install("legacy", slot.namespace, chart="demo", wait=True)
    # removing the records of a release that keeps other objects would orphan them
    legacy_source(slot, records="removed")
    refused = slot.cli("deploy", "test1", "--take-over")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "also holds" in refused.stderr and "Service/legacy" in refused.stderr
    assert slot.deployment("legacy").spec.template.spec.containers[0].image == "demo-app:1.0"
    assert [r["status"] for r in helm.list(slot.namespace)] == ["deployed"]

    legacy_source(slot, TAKEN_SERVICE, records="removed")  # every object of the release
    planned = slot.cli("plan", "test1", "--take-over")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "its 1 record will be removed" in planned.stdout
    taken = slot.cli("deploy", "test1", "--take-over")
    assert taken.returncode == 0, taken.stdout + taken.stderr
    assert "removed its 1 record(s)" in taken.stdout
    assert helm.list(slot.namespace) == []
    helm.uninstall("legacy", slot.namespace)  # Helm knows no such release
    assert slot.deployment("legacy").metadata.deletionTimestamp is None
    assert not gone(slot, Service, "legacy")
    cm = slot.client.get(ConfigMap, "legacy-config", namespace=slot.namespace)
    assert cm.data == {"message": "taken"}
