"""A slot whose objects come from the team's own manifests, on the real control plane.

Every kind the cluster knows is applied by server-side apply in a safe order (read back
from the API server's audit log), waited on by its own rule, failed fast, rolled back,
pruned when it leaves the set (never when the set comes out empty), and recorded so that
``rollback`` re-applies exactly what ran. Secret data never reaches a plan or a record.
"""

from __future__ import annotations

import base64
import gzip
import json
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet, Deployment, StatefulSet
from lightkube.resources.batch_v1 import CronJob, Job
from lightkube.resources.core_v1 import (
    ConfigMap,
    PersistentVolumeClaim,
    Secret,
)

from shipway import api
from shipway.backends.kubernetes import records
from shipway.engine.outcome import NoAnchor, Rolled, RolledBack, Unchanged
from shipway.errors import InputError
from tests.backends.kubernetes.conftest import Lines, Slot
from tests.testenv.k8s import audit_events, wait_for

pytestmark = pytest.mark.k8s

ADMIN = "shipway-test-admin"
PASSWORD = "pw-7d1c0e55-never-print-me"

SPEC = """
[app]
name = "shop"

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"

[slots.test1.source]
manifests = ["k8s/"]
image_containers = {containers}
cluster_scoped = ["CustomResourceDefinition"]
"""

BASE = """
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
data:
  greeting: hello
---
apiVersion: v1
kind: Secret
metadata:
  name: web-secret
stringData:
  password: {password}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app.kubernetes.io/name: web
spec:
  replicas: 2
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      serviceAccountName: web
      containers:
        - name: app
          image: registry.example/web:1
          envFrom: [{{secretRef: {{name: web-secret}}}}]
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
"""

WORKLOADS = """
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  replicas: 2
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
        - name: postgres
          image: registry.example/db:1
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
        - name: agent
          image: registry.example/agent:1
---
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: registry.example/migrate:1
---
apiVersion: batch/v1
kind: CronJob
metadata:
  name: report
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
            - name: report
              image: registry.example/report:1
"""


def crd_yaml(group: str) -> str:
    return textwrap.dedent(
        f"""
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata:
          name: widgets.{group}
        spec:
          group: {group}
          scope: Namespaced
          names: {{plural: widgets, singular: widget, kind: Widget}}
          versions:
            - name: v1
              served: true
              storage: true
              schema:
                openAPIV3Schema:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
        ---
        apiVersion: {group}/v1
        kind: Widget
        metadata:
          name: w1
        spec:
          size: 3
        """
    )


def claim_yaml(storage_class: str) -> str:
    return textwrap.dedent(
        f"""
        apiVersion: v1
        kind: PersistentVolumeClaim
        metadata:
          name: data
        spec:
          storageClassName: {storage_class}
          accessModes: [ReadWriteOnce]
          resources: {{requests: {{storage: 1Gi}}}}
        """
    )


def spec(*containers: str) -> str:
    """The spec, its source naming ``containers`` for --image (KIND/NAME[:CONTAINER])."""
    return SPEC.replace("{containers}", json.dumps(list(containers)))


def write(slot: Slot, files: dict[str, str], spec: str = spec("Deployment/web:app")) -> Any:
    manifests = slot.directory / "k8s"
    if manifests.exists():
        for old in manifests.iterdir():
            old.unlink()
    manifests.mkdir(exist_ok=True)
    for name, text in files.items():
        (manifests / name).write_text(textwrap.dedent(text))
    return slot.write(spec)


def base(password: str = PASSWORD) -> str:
    return BASE.format(password=password)


def deploy(slot: Slot, app: Any, **kw: Any) -> tuple[Any, Lines]:
    kw.setdefault("tuning", {"unschedulable_window": 3, "readiness_default": 10})
    return slot.deploy(app, **kw)


# -- the audit log -------------------------------------------------------------------------


@contextmanager
def audited(log: Path) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    yield audit_events(log)


def applies(events: list[dict[str, Any]], namespace: str, crd: str) -> list[str]:
    """The server-side applies shipway made, in the order the API server received them,
    as ``resource/name`` (the slot's namespace, and the CRD)."""
    mine = [
        e
        for e in events
        if e.get("user", {}).get("username") == ADMIN
        and e.get("verb") == "patch"
        and "fieldManager=shipway" in e.get("requestURI", "")
        and "force=true" in e.get("requestURI", "")
        and (
            e.get("objectRef", {}).get("namespace") == namespace
            or e.get("objectRef", {}).get("name") == crd
        )
        and not str(e.get("objectRef", {}).get("name", "")).startswith("shipway.")
    ]
    mine.sort(key=lambda e: e["requestReceivedTimestamp"])
    return [f"{e['objectRef']['resource']}/{e['objectRef']['name']}" for e in mine]


# -- fixtures: cluster-scoped helpers the tests make and remove ----------------------------


@pytest.fixture
def cluster_scoped(k8s_client: Client) -> Iterator[Callable[[Any], Any]]:
    """``make(obj)``: create a cluster-scoped object, deleted after the test (CRDs shipway
    applied are deleted by name through ``made.append``)."""
    made: list[Any] = []

    def make(obj: Any) -> Any:
        created = k8s_client.create(obj)
        made.append((type(obj), obj.metadata.name))
        return created

    make.made = made  # type: ignore[attr-defined]
    yield make
    for kind, name in reversed(made):
        with suppress(ApiError):
            k8s_client.delete(kind, name)


def bound_storage(make: Callable[[Any], Any], namespace: str) -> str:
    """A StorageClass with Immediate binding and a volume made for it by hand: the volume
    controller binds a claim of that class to it."""
    name = f"manual-{namespace}"[:63]
    make(
        from_dict(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": "example.com/made-by-hand",
                "volumeBindingMode": "Immediate",
            }
        )
    )
    make(
        from_dict(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "storageClassName": name,
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "hostPath": {"path": "/tmp/shipway-test"},
                },
            }
        )
    )
    return name


# -- the tests -----------------------------------------------------------------------------


def test_every_kind_deploys_in_the_safe_order_and_is_waited_on(
    slot: Slot, k8s_audit_log: Path, cluster_scoped: Any
) -> None:
    group = f"{slot.namespace}.example.com"
    storage = bound_storage(cluster_scoped, slot.namespace)
    cluster_scoped.made.append((CustomResourceDefinition, f"widgets.{group}"))
    # The files list the kinds in the wrong order on purpose: workloads first.
    app = write(
        slot,
        {
            "a-workloads.yaml": WORKLOADS,
            "b-app.yaml": base(),
            "c-crd.yaml": crd_yaml(group),
            "d-claim.yaml": claim_yaml(storage),
        },
    )
    with audited(k8s_audit_log) as events:
        outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text

    expected = [
        f"customresourcedefinitions/widgets.{group}",
        "serviceaccounts/web",
        "configmaps/web-config",
        "secrets/web-secret",
        "persistentvolumeclaims/data",
        "widgets/w1",
        "statefulsets/db",
        "daemonsets/agent",
        "jobs/migrate",
        "cronjobs/report",
        "deployments/web",
        "services/web",
    ]
    deadline = time.monotonic() + 10
    while (seen := applies(events(), slot.namespace, f"widgets.{group}")) != expected:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert seen == expected

    # waited on, each by its own rule
    for key in (
        f"CustomResourceDefinition/widgets.{group}",
        "PersistentVolumeClaim/data",
        f"Widget.{group}/w1",
        "StatefulSet/db",
        "DaemonSet/agent",
        "Job/migrate",
        "CronJob/report",
        "Deployment/web",
    ):
        assert f"wait until {key} is ready" in lines.text
    for key in ("ConfigMap/web-config", "Secret/web-secret", "Service/web"):
        assert f"wait until {key}" not in lines.text  # ready once applied
    ns = slot.namespace
    c = slot.client
    assert c.get(StatefulSet, "db", namespace=ns).status.readyReplicas == 2
    assert c.get(DaemonSet, "agent", namespace=ns).status.numberAvailable == 2
    job = c.get(Job, "migrate", namespace=ns)
    assert {x.type: x.status for x in job.status.conditions}.get("Complete") == "True"
    assert c.get(PersistentVolumeClaim, "data", namespace=ns).status.phase == "Bound"
    assert c.get(Deployment, "web", namespace=ns).status.availableReplicas == 2
    # labelled for pruning, the team's own labels kept, applied by shipway only
    web = c.get(Deployment, "web", namespace=ns)
    assert web.metadata.labels == {
        "app.kubernetes.io/name": "web",
        "app.kubernetes.io/managed-by": "shipway",
        "shipway.io/app": "shop",
        "shipway.io/slot": "test1",
    }
    appliers = {f.manager for f in web.metadata.managedFields if f.operation == "Apply"}
    assert appliers == {"shipway"}
    # the Secret holds its data in the cluster, and nowhere else
    secret = c.get(Secret, "web-secret", namespace=ns)
    assert base64.b64decode(secret.data["password"]).decode() == PASSWORD
    assert PASSWORD not in lines.text
    stored = c.get(Secret, records.record_name("shop", 1), namespace=ns)
    payload = gzip.decompress(base64.b64decode(stored.data["release"])).decode()
    assert PASSWORD not in payload
    assert base64.b64encode(PASSWORD.encode()).decode() not in payload
    assert "${secrets.S_" in payload


def test_a_plan_of_a_source_shows_no_secret_data(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base()})
    deploy(slot, app)
    write(slot, {"app.yaml": base("another-" + PASSWORD)})
    result = slot.cli("plan", "test1", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    assert base64.b64encode(("another-" + PASSWORD).encode()).decode() not in result.stdout
    plan = json.loads(result.stdout)
    assert [s["unit"] for s in plan["steps"] if s["step"] == "apply"] == ["Secret/web-secret"]
    assert any("Secret/web-secret" in line and "***" in line for line in plan["diff"])


def test_a_redeploy_of_the_same_manifests_changes_nothing(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base()})
    deploy(slot, app)
    before = slot.replicasets("web")
    plan = api.plan(app, "test1", backend=slot.backend(app))
    assert [s.name for s in plan.steps] == ["no-op"] and plan.unchanged
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Unchanged), lines.text
    assert set(slot.replicasets("web")) == set(before)
    assert slot.statuses(app) == {1: "deployed"}  # no revision for nothing


def test_a_changed_manifest_is_a_change_and_an_edit_out_of_band_is_drift(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base()})
    deploy(slot, app)
    # the spec is the same; what its source holds is not
    app = write(slot, {"app.yaml": base().replace("greeting: hello", "greeting: bonjour")})
    diff = api.diff(app, "test1", backend=slot.backend(app))
    assert [(c.unit, c.kind) for c in diff.changes] == [("ConfigMap/web-config", "changed")]
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    # someone edits an object by hand: the digest annotation stays, its fields do not
    slot.client.patch(
        ConfigMap,
        "web-config",
        {"data": {"greeting": "edited by hand"}},
        namespace=slot.namespace,
        field_manager="kubectl-edit",
    )
    plan = api.plan(app, "test1", backend=slot.backend(app))
    assert [getattr(s, "unit", None) for s in plan.steps] == ["ConfigMap/web-config"]
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    live = slot.client.get(ConfigMap, "web-config", namespace=slot.namespace)
    assert live.data == {"greeting": "bonjour"}


def test_an_image_replaces_the_containers_the_source_names(slot: Slot) -> None:
    files = {"app.yaml": base(), "w.yaml": WORKLOADS}
    app = write(slot, files, spec("Deployment/web:app", "StatefulSet/db"))
    outcome, lines = deploy(slot, app, image="registry.example/web:2")
    assert isinstance(outcome, Rolled), lines.text
    ns = slot.namespace
    assert slot.images()["web"] == "registry.example/web:2"
    db = slot.client.get(StatefulSet, "db", namespace=ns)
    assert db.spec.template.spec.containers[0].image == "registry.example/web:2"
    agent = slot.client.get(DaemonSet, "agent", namespace=ns)
    assert agent.spec.template.spec.containers[0].image == "registry.example/agent:1"


def test_a_crash_looping_statefulset_is_rolled_back_with_the_reason(slot: Slot) -> None:
    app = write(slot, {"w.yaml": WORKLOADS}, spec("StatefulSet/db"))
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    outcome, lines = deploy(slot, app, image="registry.example/db:crashloop")
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.process == "StatefulSet/db"
    assert outcome.failure.reason == "CrashLoopBackOff"
    assert "container postgres exited" in outcome.failure.message
    db = slot.client.get(StatefulSet, "db", namespace=slot.namespace)
    assert db.spec.template.spec.containers[0].image == "registry.example/db:1"
    assert db.status.readyReplicas == 2
    assert db.status.updateRevision == db.status.currentRevision
    assert slot.statuses(app) == {1: "deployed", 2: "failed"}


def test_a_failing_job_is_rolled_back_with_the_reason(slot: Slot) -> None:
    app = write(slot, {"w.yaml": WORKLOADS}, spec("Job/migrate"))
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    outcome, lines = deploy(slot, app, image="registry.example/migrate:crashloop")
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.process == "Job/migrate"
    assert outcome.failure.reason in ("JobFailed", "CrashLoopBackOff")
    assert "replacing Job/migrate" in lines.text
    job = slot.client.get(Job, "migrate", namespace=slot.namespace)
    assert job.spec.template.spec.containers[0].image == "registry.example/migrate:1"
    assert {x.type: x.status for x in job.status.conditions}.get("Complete") == "True"


def test_an_object_removed_from_the_set_is_pruned(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base(), "w.yaml": WORKLOADS})
    deploy(slot, app)
    app = write(slot, {"app.yaml": base()})  # the workloads leave the set
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    for kind, name in (
        (StatefulSet, "db"),
        (DaemonSet, "agent"),
        (Job, "migrate"),
        (CronJob, "report"),
    ):
        with pytest.raises(ApiError) as gone:
            slot.client.get(kind, name, namespace=slot.namespace)
        assert gone.value.status.code == 404
    assert slot.client.get(Deployment, "web", namespace=slot.namespace)


def test_an_empty_set_is_refused_and_prunes_nothing(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base()})
    deploy(slot, app)
    app = write(slot, {"app.yaml": "# everything was commented out\n"})
    result = slot.cli("deploy", "test1")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "holds no objects" in result.stderr and "refusing" in result.stderr
    assert slot.client.get(Deployment, "web", namespace=slot.namespace)
    assert slot.client.get(ConfigMap, "web-config", namespace=slot.namespace)
    assert slot.statuses(app) == {1: "deployed"}


KUSTOMIZATION = """
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [app.yaml]
"""


@pytest.mark.parametrize("named", ["k8s/", "k8s/kustomization.yml"])
def test_a_kustomization_is_refused_with_how_to_render_it(slot: Slot, named: str) -> None:
    """Its files are kustomize's input (the bases before their patches), not the objects
    to apply: exit 2 naming the file and how to render it, nothing touched."""
    app = write(slot, {"app.yaml": base(), "kustomization.yml": KUSTOMIZATION})
    app = slot.edit('manifests = ["k8s/"]', f"manifests = [{named!r}]")
    for command in (("plan", "test1"), ("deploy", "test1")):
        result = slot.cli(*command)
        out = result.stdout + result.stderr
        assert result.returncode == 2, out
        assert "k8s/kustomization.yml" in result.stderr, out
        assert "shipway does not build" in result.stderr, out
        assert "kustomize build k8s > rendered.yaml" in result.stderr, out
        assert "point `manifests` at the output" in result.stderr, out
        assert "metadata.name" not in out
    with pytest.raises(ApiError):
        slot.client.get(ConfigMap, "web-config", namespace=slot.namespace)
    assert slot.statuses(app) == {}


def test_rollback_re_applies_the_recorded_objects(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base()})
    deploy(slot, app)
    app = write(slot, {"app.yaml": base("second-" + PASSWORD).replace("hello", "bonjour")})
    outcome, _ = deploy(slot, app, image="registry.example/web:2")
    assert isinstance(outcome, Rolled)
    ns = slot.namespace
    # the manifests are gone from this machine: the record is all a rollback needs
    for f in (slot.directory / "k8s").iterdir():
        f.unlink()
    outcome = api.rollback(app, "test1", backend=slot.backend(app), reporter=Lines())
    assert isinstance(outcome, Rolled) and outcome.to_revision == 3
    assert slot.images()["web"] == "registry.example/web:1"
    assert slot.client.get(ConfigMap, "web-config", namespace=ns).data == {"greeting": "hello"}
    secret = slot.client.get(Secret, "web-secret", namespace=ns)
    assert base64.b64decode(secret.data["password"]).decode() == PASSWORD
    assert slot.statuses(app) == {1: "superseded", 2: "superseded", 3: "deployed"}


def test_a_custom_resource_whose_controller_never_reports_times_out_saying_so(
    slot: Slot, cluster_scoped: Any
) -> None:
    group = f"{slot.namespace}.example.com"
    cluster_scoped.made.append((CustomResourceDefinition, f"widgets.{group}"))
    # No status subresource: the manifest's own status is what the object says, and no
    # controller will ever say more.
    stuck = crd_yaml(group) + textwrap.dedent(
        """\
        status:
          conditions:
            - type: Ready
              status: "False"
              message: waiting for its controller
        """
    )
    app = write(slot, {"crd.yaml": stuck}, spec())
    outcome, lines = deploy(slot, app, timeout=4)
    assert isinstance(outcome, NoAnchor), lines.text
    assert outcome.failure.reason == "Timeout"
    assert outcome.failure.process == f"Widget.{group}/w1"
    assert "Ready is False: waiting for its controller" in outcome.failure.message


def test_cluster_scoped_objects_are_refused_unless_the_slot_allows_them(slot: Slot) -> None:
    group = f"{slot.namespace}.example.com"
    refusing = spec().replace('cluster_scoped = ["CustomResourceDefinition"]\n', "")
    app = write(slot, {"crd.yaml": crd_yaml(group)}, refusing)
    with pytest.raises(InputError) as refused:
        api.plan(app, "test1", backend=slot.backend(app))
    assert f"CustomResourceDefinition/widgets.{group} is cluster-scoped" in str(refused.value)
    with pytest.raises(ApiError):
        slot.client.get(CustomResourceDefinition, f"widgets.{group}")


def test_an_object_of_another_namespace_is_refused_naming_its_file(slot: Slot) -> None:
    elsewhere = base().replace("name: web-config\n", "name: web-config\n  namespace: kube-system\n")
    write(slot, {"app.yaml": elsewhere})
    result = slot.cli("plan", "test1")
    assert result.returncode == 2
    assert "k8s/app.yaml#2: ConfigMap/web-config names namespace 'kube-system'" in result.stderr


def test_a_claim_is_never_pruned(slot: Slot, cluster_scoped: Any) -> None:
    storage = bound_storage(cluster_scoped, slot.namespace)
    app = write(slot, {"app.yaml": base(), "claim.yaml": claim_yaml(storage)})
    deploy(slot, app)
    app = write(slot, {"app.yaml": base()})
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    # a plan never removes a claim (invariant 11): no step deletes it, the diff says it left
    assert "remove PersistentVolumeClaim/data" not in lines.text, lines.text
    assert "PersistentVolumeClaim/data" in lines.text
    assert slot.client.get(PersistentVolumeClaim, "data", namespace=slot.namespace)


def test_status_lists_every_workload_of_the_source(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base(), "w.yaml": WORKLOADS})
    deploy(slot, app)
    result = slot.cli("status", "test1", "-o", "json")
    assert result.returncode == 0, result.stderr
    rows = {p["process"]: p for p in json.loads(result.stdout)["processes"]}
    assert set(rows) == {
        "CronJob/report",
        "DaemonSet/agent",
        "Deployment/web",
        "Job/migrate",
        "StatefulSet/db",
    }
    assert rows["StatefulSet/db"]["ready"] == 2
    assert rows["Deployment/web"]["image"] == "registry.example/web:1"


def test_stop_scales_the_source_down_and_a_deploy_brings_it_back(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base(), "w.yaml": WORKLOADS})
    deploy(slot, app)
    stopped = slot.cli("stop", "test1")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "scaled Deployment/web to 0" in stopped.stdout
    assert "scaled StatefulSet/db to 0" in stopped.stdout
    assert slot.deployment("web").spec.replicas == 0
    plan = api.plan(app, "test1", backend=slot.backend(app))
    starts = {getattr(s, "unit", "") for s in plan.steps if getattr(s, "action", "") == "start"}
    assert starts == {"StatefulSet/db", "Deployment/web"}
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    assert slot.deployment("web").status.availableReplicas == 2
    assert slot.client.get(StatefulSet, "db", namespace=slot.namespace).status.readyReplicas == 2


PROMOTING = """
[app]
name = "shop"

[source]
manifests = ["k8s/"]
image_containers = ["Deployment/web:app"]

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"
promotes_to = "prod"

[slots.prod]
backend = "kubernetes"
namespace = "{prod}"
role = "production"
"""


def test_a_source_slot_promotes_the_digest_it_runs(slot: Slot, k8s_namespaces: Any) -> None:
    prod = k8s_namespaces()
    digest = "sha256:" + "5e" * 32
    write(slot, {"app.yaml": base()}, PROMOTING.replace("{prod}", prod))
    tested = f"registry.example/web:7@{digest}"
    deployed = slot.cli("deploy", "test1", "--image", tested)
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    promoted = slot.cli("promote", "test1", "--confirm", "prod")
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    live = slot.client.get(Deployment, "web", namespace=prod)
    assert live.spec.template.spec.containers[0].image == f"registry.example/web@{digest}"


def test_destroy_deletes_the_source_objects_and_keeps_claims_and_crds(
    slot: Slot, cluster_scoped: Any
) -> None:
    group = f"{slot.namespace}.example.com"
    storage = bound_storage(cluster_scoped, slot.namespace)
    cluster_scoped.made.append((CustomResourceDefinition, f"widgets.{group}"))
    files = {"app.yaml": base(), "w.yaml": WORKLOADS, "crd.yaml": crd_yaml(group)}
    app = write(slot, {**files, "claim.yaml": claim_yaml(storage)})
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    ns, c = slot.namespace, slot.client
    assert c.get(Secret, "shipway.sources.v1.shop.v1", namespace=ns)  # the Secret data kept

    listed = {str(i) for i in api.leftovers(app, "test1", backend=slot.backend(app))}
    assert f"StatefulSet db (namespace {ns})" in listed
    assert f"Widget w1 (namespace {ns})" in listed
    assert f"PersistentVolumeClaim data (namespace {ns})" in listed
    said = Lines()
    gone = api.destroy(app, "test1", confirm="test1", backend=slot.backend(app), reporter=said)
    assert not any(i.data for i in gone)
    widget = create_namespaced_resource(group, "v1", "Widget", "widgets")
    for kind, name in (
        (Deployment, "web"),
        (StatefulSet, "db"),
        (DaemonSet, "agent"),
        (Job, "migrate"),
        (CronJob, "report"),
        (ConfigMap, "web-config"),
        (Secret, "web-secret"),
        (widget, "w1"),
        (Secret, "shipway.sources.v1.shop.v1"),
        (Secret, records.record_name("shop", 1)),
    ):
        with pytest.raises(ApiError) as err:
            c.get(kind, name, namespace=ns)
        assert err.value.status.code == 404, f"{kind.__name__}/{name} is still there"
    # a claim only with --volumes; a CRD never (it would take every Widget in the cluster)
    assert c.get(PersistentVolumeClaim, "data", namespace=ns)
    assert c.get(CustomResourceDefinition, f"widgets.{group}")
    assert f"CustomResourceDefinition/widgets.{group} stays" in said.text
    assert api.history(app, "test1", backend=slot.backend(app)) == []


def test_build_is_refused_on_a_source_slot_before_anything_is_touched(slot: Slot) -> None:
    app = write(slot, {"app.yaml": base()})
    for command in (("plan", "test1", "--build"), ("deploy", "test1", "--build"),
                    ("build", "test1")):  # fmt: skip
        result = slot.cli(*command)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "takes its objects from a source" in result.stderr
        assert "deploy --image REF" in result.stderr
    with pytest.raises(ApiError):
        slot.client.get(Deployment, "web", namespace=slot.namespace)
    assert slot.statuses(app) == {}


def fail_a_run_of_the_cronjob(slot: Slot) -> None:
    """A Job of CronJob/report (as its controller would make it), failed."""
    ns = slot.namespace
    cron = slot.client.get(CronJob, "report", namespace=ns)
    owner = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "report"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "report-manual",
            "namespace": ns,
            "ownerReferences": [{**owner, "uid": cron.metadata.uid, "controller": True}],
        },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "report", "image": "registry.example/report:crashloop"}
                    ],
                }
            },
        },
    }
    slot.client.create(from_dict(job))
    wait_for(
        slot.client,
        Job,
        "report-manual",
        lambda j: any(
            c.type == "Failed" and c.status == "True"
            for c in (j.status and j.status.conditions) or []
        ),
        namespace=ns,
        timeout=60,
        what="the CronJob's Job failed",
    )


def test_a_cronjobs_failed_last_job_is_reported(slot: Slot) -> None:
    app = write(slot, {"w.yaml": WORKLOADS}, spec("CronJob/report"))
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    fail_a_run_of_the_cronjob(slot)
    # it failed before this deploy: said, and the deploy is not failed for it
    outcome, lines = deploy(slot, app, image="registry.example/report:2")
    assert isinstance(outcome, Rolled), lines.text
    assert "note: CronJob/report: its last Job report-manual failed before this deploy" in (
        lines.text
    )


def test_status_shows_a_cronjobs_last_job_and_why_it_failed(slot: Slot) -> None:
    app = write(slot, {"w.yaml": WORKLOADS}, spec("CronJob/report"))
    outcome, lines = deploy(slot, app)
    assert isinstance(outcome, Rolled), lines.text
    result = slot.cli("status", "test1", "-o", "json")
    assert result.returncode == 0, result.stderr
    rows = {p["process"]: p for p in json.loads(result.stdout)["processes"]}
    assert rows["CronJob/report"]["last_job"] is None  # it never ran
    fail_a_run_of_the_cronjob(slot)
    result = slot.cli("status", "test1", "-o", "json")
    assert result.returncode == 0, result.stderr
    rows = {p["process"]: p for p in json.loads(result.stdout)["processes"]}
    report = rows["CronJob/report"]
    assert report["last_job"] == "report-manual"
    assert report["last_job_state"] == "failed"
    assert report["last_job_reason"].startswith("BackoffLimitExceeded"), report
    text = slot.cli("status", "test1")
    assert text.returncode == 0, text.stderr
    row = next(line for line in text.stdout.splitlines() if "CronJob/report" in line)
    assert "report-manual" in row and "failed" in row and "BackoffLimitExceeded" in row, (
        text.stdout
    )


def test_the_apps_volumes_are_said_not_to_be_mounted_on_a_source_slot(slot: Slot) -> None:
    volume = '\n[volumes.media]\npath = "media"\n'
    write(slot, {"app.yaml": base()}, spec("Deployment/web:app") + volume)
    result = slot.cli("plan", "test1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the app's volumes (media) are not mounted on slot 'test1'" in (
        result.stdout + result.stderr
    )
