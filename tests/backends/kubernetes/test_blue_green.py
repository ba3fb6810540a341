"""Blue/green generations on the real control plane.

A slot with ``strategy = "blue-green"`` deploys each release as a new generation beside the
live one, in the slot's namespace; the host's one Ingress moves to the new generation's
Service only once it is ready; the old generation's Service is dropped (best effort) and
the old generation is put to sleep (scaled to zero, kept) for an instant switch back.
The order of the API operations is read from the API server's own audit log. The rules
themselves (pure) are in ``test_generations.py``.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import RoleRef, Subject
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Secret, Service
from lightkube.resources.networking_v1 import Ingress
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding
from lightkube.types import PatchType

from shipway import api
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.lease import lease_name
from shipway.engine.outcome import Rolled, RolledBack
from shipway.errors import BackendError, InputError
from shipway.plan.model import Scale
from tests.backends.kubernetes.conftest import TOKEN, Lines, Slot
from tests.backends.kubernetes.test_rbac import documented, documented_role
from tests.testenv.k8s import audit_events, wait_for, wait_for_all

pytestmark = pytest.mark.k8s


def host(slot: Slot) -> str:
    """The test's own host name: the cluster (and its cluster-wide Ingress lookups) is
    shared with other tests, whose namespaces may still be going away."""
    return f"{slot.namespace}.example.com"


def ingress_name(slot: Slot) -> str:
    return render.ingress_name("shop", host(slot))


def blue_green(slot: Slot, sleep_after: str = "0") -> str:
    return f"""strategy = "blue-green"
sleep_after = {sleep_after}
routes = [{{ host = "{host(slot)}", process = "web" }}]"""


ADMIN = "shipway-test-admin"


def names(slot: Slot) -> list[str]:
    return [g["name"] for g in gens(slot)]


def gens(slot: Slot) -> list[dict[str, Any]]:
    result = slot.cli("gens", "test1", "-o", "json")
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout)["generations"])


def states(slot: Slot) -> dict[str, str]:
    return {g["name"]: g["state"] for g in gens(slot)}


def ingress(slot: Slot) -> Any:
    return slot.client.get(Ingress, ingress_name(slot), namespace=slot.namespace)


def backend_service(slot: Slot) -> str:
    return str(ingress(slot).spec.rules[0].http.paths[0].backend.service.name)


def service_exists(slot: Slot, name: str) -> bool:
    try:
        slot.client.get(Service, name, namespace=slot.namespace)
    except ApiError as exc:
        assert exc.status.code == 404
        return False
    return True


def replicas(slot: Slot, process: str, generation: str) -> int:
    dep = slot.deployment(render.workload_name("shop", process, generation))
    return int(dep.spec.replicas)


def of_generation(slot: Slot, generation: str) -> set[str]:
    """Every Deployment, Service, Secret and ConfigMap labelled with the generation."""
    labels = {render.GENERATION: generation}
    found = set()
    for res in (Deployment, Service, Secret):
        for obj in slot.client.list(res, namespace=slot.namespace, labels=labels):
            found.add(f"{res.__name__}/{obj.metadata.name}")
    return found


def rolled(result: Any) -> str:
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    return out


# -- the audit log --------------------------------------------------------------------


@contextmanager
def audited(log: Path) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The audit events written from here on (read them with the yielded function)."""
    yield audit_events(log)


def operations(events: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The admin's requests about objects in ``namespace``, in the order received."""
    mine = [
        e
        for e in events
        if e.get("user", {}).get("username") == ADMIN
        and e.get("objectRef", {}).get("namespace") == namespace
    ]
    return sorted(mine, key=lambda e: e["requestReceivedTimestamp"])


def index(ops: list[dict[str, Any]], what: str, match: Callable[[dict[str, Any]], bool]) -> int:
    for i, e in enumerate(ops):
        if match(e):
            return i
    seen = [(e["verb"], e["objectRef"].get("resource"), e["objectRef"].get("name")) for e in ops]
    raise AssertionError(f"no {what} in the audit log; seen: {seen}")


def is_op(verb: str, resource: str, name: str | None = None, sub: str | None = None) -> Any:
    def match(e: dict[str, Any]) -> bool:
        ref = e["objectRef"]
        return (
            e["verb"] == verb
            and ref.get("resource") == resource
            and (name is None or ref.get("name") == name)
            and ref.get("subresource") == sub
        )

    return match


def watches_generation(generation: str) -> Any:
    selector = f"shipway.io%2Fgeneration%3D{generation}"
    return lambda e: e["verb"] == "watch" and selector in e["requestURI"]


def settled(events: Callable[[], list[dict[str, Any]]], namespace: str, done: Any) -> list[Any]:
    """The operations once ``done`` is among them: a watch is logged when it closes."""
    deadline = time.monotonic() + 15
    while True:
        ops = operations(events(), namespace)
        if any(done(e) for e in ops) or time.monotonic() > deadline:
            return ops
        time.sleep(0.2)


# -- the switch -----------------------------------------------------------------------


def test_a_deploy_switches_to_a_new_generation_in_the_declared_order(
    slot: Slot, k8s_audit_log: Path
) -> None:
    app = slot.write(slot_extra=blue_green(slot))
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    assert "nothing to do: no generation was live before" in lines.text
    [g1] = names(slot)
    assert g1.startswith("test1-") and backend_service(slot) == f"shop-web-{g1}"
    assert ingress(slot).metadata.labels[render.ROUTES_TO] == g1

    with audited(k8s_audit_log) as events:
        outcome, lines = slot.deploy(app, image="registry.example/shop:2")
    assert isinstance(outcome, Rolled) and (outcome.from_revision, outcome.to_revision) == (1, 2)
    g2 = slot.records(app)[2].generation
    assert g2 and g2 != g1
    new, old = f"shop-web-{g2}", f"shop-web-{g1}"

    ops = settled(events, slot.namespace, watches_generation(g2))
    scale = index(ops, "scale of the new web", is_op("patch", "deployments", new, "scale"))
    wait = index(ops, "watch of the new generation", watches_generation(g2))
    point = index(
        ops, "apply of the host's Ingress", is_op("patch", "ingresses", ingress_name(slot))
    )
    drop = index(ops, "delete of the old Service", is_op("delete", "services", old))
    asleep = [
        i
        for i, e in enumerate(ops)
        if is_op("patch", "deployments", sub="scale")(e) and g1 in e["objectRef"]["name"]
    ]
    assert scale < wait < point < drop < min(asleep), [
        (e["verb"], e["objectRef"].get("name"), e["objectRef"].get("subresource")) for e in ops
    ]
    assert len(asleep) == 2  # web and worker
    # the host was written once, after every wait began; nothing else of routing moved
    routing = [e for e in ops if e["objectRef"].get("resource") == "ingresses" and e["verb"] in
               ("create", "update", "patch", "delete")]  # fmt: skip
    assert [(e["verb"], e["objectRef"]["name"]) for e in routing] == [("patch", ingress_name(slot))]
    last_wait = max(i for i, e in enumerate(ops) if watches_generation(g2)(e))
    assert last_wait < point
    # the Service's endpoints were read after the wait began, before the host moved
    listed = index(ops, "list of the Service's endpoints", is_op("list", "endpointslices"))
    assert wait < listed < point

    assert states(slot) == {g1: "asleep", g2: "live"}
    assert backend_service(slot) == new
    assert ingress(slot).metadata.labels[render.ROUTES_TO] == g2
    assert not service_exists(slot, old)  # the old generation's route is dropped
    assert (replicas(slot, "web", g1), replicas(slot, "worker", g1)) == (0, 0)
    assert slot.deployment(new).status.availableReplicas == 2
    records = slot.records(app)
    assert [(r.status, r.generation) for r in records.values()] == [
        ("superseded", g1),
        ("deployed", g2),
    ]


def test_a_scale_is_not_reverted_by_a_later_apply_in_the_generation(slot: Slot) -> None:
    """The generation's Deployments are applied without ``spec.replicas``: the count
    belongs to the scale subresource's field manager, so a restart (an apply of a new
    template into the live generation) keeps whatever the count was scaled to."""
    app = slot.write(slot_extra=blue_green(slot))
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    [g1] = names(slot)
    web = f"shop-web-{g1}"
    owners = {
        (f.manager, f.operation, f.subresource or ""): json.dumps(f.fieldsV1)
        for f in slot.deployment(web).metadata.managedFields
    }
    # no applier holds the count (so no apply can take it back)
    assert ("shipway", "Apply", "") in owners
    assert not [k for k, fields in owners.items() if k[1] == "Apply" and '"f:replicas"' in fields]

    # another actor (an autoscaler, a person) scales the live generation to 3
    slot.client.patch(
        Deployment.Scale,
        web,
        {"spec": {"replicas": 3}},
        namespace=slot.namespace,
        patch_type=PatchType.MERGE,
        field_manager="test-autoscaler",
    )
    wait_for(
        slot.client,
        Deployment,
        web,
        lambda d: (d.status.availableReplicas or 0) == 3,
        namespace=slot.namespace,
    )
    before_id = slot.deployment(web).spec.template.metadata.annotations[render.DEPLOYMENT_ID]

    out = rolled(slot.cli("restart", "test1", "web"))
    assert f"update Deployment/{web}" in out
    after = slot.deployment(web)
    assert after.spec.template.metadata.annotations[render.DEPLOYMENT_ID] != before_id
    assert after.spec.replicas == 3 and after.status.availableReplicas == 3
    assert backend_service(slot) == web  # a restart inside the live generation moves no host

    # stopped, then restarted: the declared count comes back
    rolled(slot.cli("stop", "test1"))
    assert slot.deployment(web).spec.replicas == 0
    out = rolled(slot.cli("restart", "test1", "worker"))
    assert f"start Deployment/{web}" in out
    assert slot.deployment(web).spec.replicas == 2


def test_a_refused_route_drop_is_reported_with_its_fix_and_the_switch_succeeds(
    slot: Slot, mint_kubeconfig: Callable[..., Path]
) -> None:
    """The API really refuses: the deploying identity holds the documented Role, except
    that it may not delete Services."""
    rules = documented_role()["rules"]
    for rule in rules:
        if "services" in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "delete"]
    env = {"KUBECONFIG": str(mint_kubeconfig(slot.namespace, rules, name="no-delete"))}
    slot.write(slot_extra=blue_green(slot))
    first = slot.cli("deploy", "test1", env=env)
    out = rolled(first)
    assert f"looked up in namespace {slot.namespace} only" in out
    [g1] = names(slot)

    second = slot.cli(
        "deploy", "test1", "--image", "registry.example/shop:2", "-o", "json", env=env
    )
    assert second.returncode == 0, second.stdout + second.stderr
    result = json.loads(second.stdout)
    assert result["outcome"] == "rolled"
    [warning] = result["warnings"]
    assert f"drop {host(slot)} from generation {g1} failed" in warning
    assert "403" in warning and "forbidden" in warning.lower()
    assert f"to fix by hand: delete Service shop-web-{g1} in namespace {slot.namespace}" in warning
    assert TOKEN not in second.stdout + second.stderr
    g2 = next(g for g in names(slot) if g != g1)
    assert backend_service(slot) == f"shop-web-{g2}"  # traffic went the right way
    assert service_exists(slot, f"shop-web-{g1}")  # what could not be dropped is still there
    assert states(slot) == {g1: "asleep", g2: "live"}  # and the walk went on
    assert replicas(slot, "web", g1) == 0


def test_a_route_drop_held_back_by_a_finalizer_is_reported_and_not_fatal(slot: Slot) -> None:
    """The delete is accepted but the Service stays (a finalizer): not dropped yet."""
    app = slot.write(slot_extra=blue_green(slot))
    slot.deploy(app)
    [g1] = names(slot)
    old = f"shop-web-{g1}"
    hold = {"metadata": {"finalizers": ["shipway.test/hold"]}}
    slot.client.patch(Service, old, hold, namespace=slot.namespace, patch_type=PatchType.MERGE)
    try:
        outcome, lines = slot.deploy(app, image="registry.example/shop:2")
        assert isinstance(outcome, Rolled) and outcome.exit_code == 0, lines.text
        [warning] = outcome.warnings
        assert "held by the finalizers shipway.test/hold" in warning
        assert f"remove the finalizers shipway.test/hold from Service {old}" in warning
        left = slot.client.get(Service, old, namespace=slot.namespace)
        assert left.metadata.deletionTimestamp is not None
    finally:
        clear = {"metadata": {"finalizers": None}}
        slot.client.patch(Service, old, clear, namespace=slot.namespace, patch_type=PatchType.MERGE)
    assert "shop-web-" + str(slot.records(app)[2].generation) == backend_service(slot)


def test_a_generation_that_never_gets_ready_leaves_the_routes_untouched(
    slot: Slot, k8s_audit_log: Path
) -> None:
    app = slot.write(slot_extra=blue_green(slot))
    slot.deploy(app)
    [g1] = names(slot)
    route = ingress(slot)
    web_sets = set(slot.replicasets(f"shop-web-{g1}"))

    with audited(k8s_audit_log) as events:
        outcome, lines = slot.deploy(
            app,
            image="registry.example/shop:neverready",
            tuning={"readiness_default": 3.0, "readiness_slack": 0.0},
        )
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.exit_code == 10 and outcome.failure.reason == "NotReady"
    assert f"point {host(slot)}" in lines.text  # planned ...
    assert f"] point {host(slot)}" not in lines.text  # ... never done
    after = ingress(slot)
    assert after.metadata.resourceVersion == route.metadata.resourceVersion
    assert backend_service(slot) == f"shop-web-{g1}"
    ops = operations(events(), slot.namespace)
    touched = [
        (e["verb"], e["objectRef"].get("resource"), e["objectRef"].get("name"))
        for e in ops
        if e["objectRef"].get("resource") in ("ingresses", "services")
        and e["verb"] in ("create", "update", "patch", "delete")
    ]
    g2 = str(slot.records(app)[2].generation)
    assert touched == [("patch", "services", f"shop-web-{g2}")]  # its own, applied with it
    assert states(slot) == {g1: "live", g2: "asleep"}  # put back to sleep
    assert set(slot.replicasets(f"shop-web-{g1}")) == web_sets
    assert slot.deployment(f"shop-web-{g1}").status.availableReplicas == 2
    assert slot.statuses(app) == {1: "deployed", 2: "failed"}


def test_switch_back_to_an_asleep_generation_then_wake_and_sleep(slot: Slot) -> None:
    app = slot.write(slot_extra=blue_green(slot))
    slot.deploy(app)
    slot.deploy(app, image="registry.example/shop:2")
    g1, g2 = names(slot)
    assert not service_exists(slot, f"shop-web-{g1}")

    out = rolled(slot.cli("switch", "test1", g1))
    assert "rolled shop/test1 from r2 to r3" in out
    assert f"Service shop-web-{g1} re-created from r3" in out  # the switch record
    order = [line.split("] ", 1)[1] for line in out.splitlines() if re.match(r"\[\d+/\d+\] ", line)]
    assert order == [
        f"scale to 2: web generation {g1}",
        f"scale to 1: worker generation {g1}",
        f"wait until 2 web ready generation {g1}",
        f"wait until 1 worker ready generation {g1}",
        f"point {host(slot)} at web generation {g1}",
        f"drop {host(slot)} from generation {g2}",
        f"put to sleep: web generation {g2}",
        f"put to sleep: worker generation {g2}",
    ]
    assert states(slot) == {g1: "live", g2: "asleep"}
    assert backend_service(slot) == f"shop-web-{g1}"
    assert slot.images()[f"shop-web-{g1}"] == "registry.example/shop:1"
    records = slot.records(app)
    assert (records[3].generation, records[3].description) == (
        g1,
        f"switch to {g1} (r1); {g2} goes to sleep",
    )
    assert slot.statuses(app) == {1: "superseded", 2: "superseded", 3: "deployed"}

    woke = slot.cli("wake", "test1", g2)
    assert woke.returncode == 0, woke.stdout + woke.stderr
    assert f"{g2} is awake (no traffic moved)" in woke.stdout
    assert states(slot) == {g1: "live", g2: "awake"}
    assert slot.deployment(f"shop-web-{g2}").status.availableReplicas == 2
    assert backend_service(slot) == f"shop-web-{g1}"

    slept = slot.cli("sleep", "test1", g2)
    assert slept.returncode == 0, slept.stderr
    assert states(slot) == {g1: "live", g2: "asleep"}
    refused = slot.cli("sleep", "test1", g1)
    assert refused.returncode == 2 and f"generation '{g1}' is live" in refused.stderr
    unknown = slot.cli("switch", "test1", "test1-19700101-000000")
    assert unknown.returncode == 2 and "no generation 'test1-19700101-000000'" in unknown.stderr

    # the backend itself never deletes, nor puts to sleep, the generation serving a host
    backend, clearance, target = (
        slot.backend(app),
        api.clear(app, "test1"),
        app.slots.target("test1"),
    )
    with pytest.raises(BackendError, match=f"generation {g1} serves {host(slot)}"):
        backend.delete_generation(clearance, target, g1, Lines())
    with pytest.raises(BackendError, match=f"generation {g1} serves {host(slot)}: it is not put"):
        backend.scale(clearance, target, Scale("web", 0, g1), Lines())
    assert replicas(slot, "web", g1) == 2


def test_deleting_a_generation_without_a_name_is_refused_and_deletes_nothing(slot: Slot) -> None:
    app = slot.write(slot_extra=blue_green(slot))
    gen = "test1-20250101-120000"
    labels = {**render.selector_labels("shop", "test1"), render.GENERATION: gen}
    slot.client.create(
        Secret(
            metadata=ObjectMeta(name=f"shop-env-{gen}", namespace=slot.namespace, labels=labels),
            stringData={"LOG_LEVEL": "info"},
        )
    )
    backend, clearance, target = (
        slot.backend(app),
        api.clear(app, "test1"),
        app.slots.target("test1"),
    )
    for nameless in ("", " "):
        with pytest.raises(InputError, match="which generation of shop/test1 to delete"):
            backend.delete_generation(clearance, target, nameless, Lines())
    assert slot.secret(f"shop-env-{gen}").metadata.labels[render.GENERATION] == gen


def test_gc_deletes_old_asleep_generations_and_never_the_live_one(slot: Slot) -> None:
    app = slot.write(slot_extra=blue_green(slot))
    for n in (1, 2, 3):
        outcome, lines = slot.deploy(app, image=f"registry.example/shop:{n}")
        assert isinstance(outcome, Rolled), lines.text
    g1, g2, g3 = names(slot)
    assert states(slot) == {g1: "asleep", g2: "asleep", g3: "live"}
    assert of_generation(slot, g1) >= {f"Deployment/shop-web-{g1}", f"Secret/shop-env-{g1}"}

    kept = slot.cli("gc", "test1", "--keep", "1")
    assert kept.returncode == 0, kept.stderr
    assert f"deleted 1 generation(s): {g1}\n" in kept.stdout
    assert names(slot) == [g2, g3]
    assert of_generation(slot, g1) == set()

    everything = slot.cli("gc", "test1", "--keep", "0", "-o", "json")
    assert everything.returncode == 0, everything.stderr
    assert json.loads(everything.stdout)["deleted"] == [g2]
    assert states(slot) == {g3: "live"}
    assert of_generation(slot, g3) == {
        f"Deployment/shop-web-{g3}",
        f"Deployment/shop-worker-{g3}",
        f"Service/shop-web-{g3}",
        f"Secret/shop-env-{g3}",
    }
    assert slot.deployment(f"shop-web-{g3}").status.availableReplicas == 2
    assert slot.statuses(app) == {1: "superseded", 2: "superseded", 3: "deployed"}  # history


# -- hosts ----------------------------------------------------------------------------

BLOG = """
[app]
name = "blog"
image = "registry.example/blog:1"
image_type = "dockerfile"

[processes.web]
command = "serve"
port = 8000

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"
routes = [{{ host = "{host}", process = "web" }}]
"""


def deploy_blog(slot: Slot, namespace: str) -> None:
    """A rolling app "blog" serving the test's host from another namespace."""
    blog = Slot(slot.directory / "blog", namespace, slot.kubeconfig, slot.client)
    blog.directory.mkdir()
    try:
        outcome, lines = blog.deploy(blog.write(BLOG, host=host(slot)))
        assert isinstance(outcome, Rolled), lines.text
    finally:
        blog.close()


def test_a_host_another_app_serves_is_refused_then_taken_with_take_host(
    slot: Slot, k8s_namespaces: Callable[[], str]
) -> None:
    other = k8s_namespaces()
    deploy_blog(slot, other)
    blog = render.ingress_name("blog", host(slot))
    # and an Ingress shipway did not make, for this host and another, in the slot's namespace
    legacy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "legacy", "namespace": slot.namespace},
        "spec": {
            "rules": [
                {"host": "legacy.example.com", "http": _paths("legacy")},
                {"host": host(slot), "http": _paths("legacy")},
            ]
        },
    }
    slot.client.create(from_dict(legacy))
    slot.write(slot_extra=blue_green(slot))

    refused = slot.cli("deploy", "test1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"host {host(slot)} is served by " in refused.stderr
    assert (
        f"blog/test1 (Ingress {other}/{blog})" in refused.stderr
        or f"unmanaged/{slot.namespace} (Ingress {slot.namespace}/legacy" in refused.stderr
    )
    assert "--take-host" in refused.stderr
    assert list(slot.client.list(Deployment, namespace=slot.namespace)) == []  # nothing made

    taken = slot.cli("deploy", "test1", "--take-host")
    out = rolled(taken)
    assert f"taking host {host(slot)} from " in out
    assert f"took {host(slot)} from blog/test1" in out and "deleted its Ingress (only rule)" in out
    assert f"took {host(slot)} from unmanaged/{slot.namespace}" in out
    with pytest.raises(ApiError):
        slot.client.get(Ingress, blog, namespace=other)
    rest = slot.client.get(Ingress, "legacy", namespace=slot.namespace)
    assert [r.host for r in rest.spec.rules] == ["legacy.example.com"]
    [g1] = names(slot)
    assert backend_service(slot) == f"shop-web-{g1}"

    # now it is this slot's: the next deploy needs no --take-host
    rolled(slot.cli("deploy", "test1", "--image", "registry.example/shop:2"))


def test_with_the_documented_cluster_role_a_namespace_scoped_deployer_sees_other_owners(
    slot: Slot, k8s_namespaces: Callable[[], str], mint_kubeconfig: Callable[..., Path]
) -> None:
    other = k8s_namespaces()
    deploy_blog(slot, other)
    blog = render.ingress_name("blog", host(slot))
    slot.write(slot_extra=blue_green(slot))
    env = {"KUBECONFIG": str(mint_kubeconfig(slot.namespace, documented_role()["rules"]))}
    user = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())["users"][0]["name"]
    # the Role alone sees the slot's namespace only: the other app's Ingress is not seen
    assert slot.cli("plan", "test1", env=env).returncode == 0

    lookup = documented(kind="ClusterRole")
    name = f"{lookup['metadata']['name']}-{slot.namespace}"
    role = from_dict({**lookup, "metadata": {"name": name}})
    binding = ClusterRoleBinding(
        metadata=ObjectMeta(name=name),
        roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
        subjects=[Subject(kind="User", name=user)],
    )
    slot.client.create(role)
    slot.client.create(binding)
    try:
        deadline = time.monotonic() + 30
        while True:  # until the authorizer has the new binding
            refused = slot.cli("deploy", "test1", env=env)
            if refused.returncode != 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"served by blog/test1 (Ingress {other}/{blog})" in refused.stderr

        # told to take it, but with no right on the other namespace: the point is undone
        taking = slot.cli("deploy", "test1", "--take-host", env=env)
        out = taking.stdout + taking.stderr
        assert taking.returncode == 12, out  # no-anchor: nothing ran here before
        assert f"taking {host(slot)} from Ingress {other}/{blog}: 403" in out
        with pytest.raises(ApiError):  # the slot's Ingress was put back as it was: none
            ingress(slot)
        theirs = slot.client.get(Ingress, blog, namespace=other)
        assert [r.host for r in theirs.spec.rules] == [host(slot)]
    finally:
        slot.client.delete(ClusterRoleBinding, name)
        slot.client.delete(ClusterRole, name)


def _paths(service: str) -> dict[str, Any]:
    backend = {"service": {"name": service, "port": {"number": 80}}}
    return {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}


# -- the dry run ----------------------------------------------------------------------


def test_plan_and_deploy_dry_run_print_the_switch_and_touch_nothing(slot: Slot) -> None:
    slot.write(slot_extra=blue_green(slot))
    rolled(slot.cli("deploy", "test1"))
    [g1] = names(slot)

    def world() -> dict[str, str]:
        out = {}
        for res in (Deployment, Service, Secret, Ingress):
            for obj in slot.client.list(res, namespace=slot.namespace):
                out[f"{res.__name__}/{obj.metadata.name}"] = obj.metadata.resourceVersion
        return out

    before = world()
    plan = slot.cli("plan", "test1", "--image", "registry.example/shop:2")
    dry = slot.cli("deploy", "test1", "--image", "registry.example/shop:2", "--dry-run")
    assert plan.returncode == 0 and dry.returncode == 0, plan.stderr + dry.stderr
    assert world() == before

    def steps(text: str) -> list[str]:
        """The numbered steps, the new generation's (timestamped) name as GEN."""
        found = [line.strip() for line in text.splitlines() if re.match(r"\s+\d+\. ", line)]
        return [
            re.sub(r"test1-\d{8}-\d{6}(-\d+)?", lambda m: m[0] if m[0] == g1 else "GEN", s)
            for s in found
        ]

    assert steps(plan.stdout) == steps(dry.stdout)
    lines = [re.sub(r"^\d+\. ", "", s) for s in steps(plan.stdout)]
    assert lines[:8] == [
        "create Secret/shop-env-GEN",
        "create Deployment/shop-web-GEN",
        "create Service/shop-web-GEN",
        "create Deployment/shop-worker-GEN",
        "scale to 2: web generation GEN",
        "scale to 1: worker generation GEN",
        "wait until 2 web ready generation GEN",
        "wait until 1 worker ready generation GEN",
    ]
    assert lines[8:] == [
        f"point {host(slot)} at web generation GEN",
        f"drop {host(slot)} from generation {g1}",
        f"put to sleep: web generation {g1}",
        f"put to sleep: worker generation {g1}",
    ]
    assert (
        f"~ Ingress/{ingress_name(slot)}: {host(slot)} from generation {g1} to generation"
        in plan.stdout
    )
    assert TOKEN not in plan.stdout + dry.stdout


# -- interruptions --------------------------------------------------------------------


def wait_switched(slot: Slot, away_from: str) -> str:
    """Until the host's Ingress routes to another generation than ``away_from`` and the
    old generation's Service is dropped: the switch is in its drain delay."""
    moved = wait_for(
        slot.client,
        Ingress,
        ingress_name(slot),
        lambda i: i.metadata.labels.get(render.ROUTES_TO) not in (None, away_from),
        namespace=slot.namespace,
        timeout=90,
    )
    wait_for_all(
        slot.client,
        Service,
        lambda seen: f"shop-web-{away_from}" not in seen,
        namespace=slot.namespace,
        timeout=30,
        what="the drop of the old generation's Service",
    )
    return str(moved.metadata.labels[render.ROUTES_TO])


def test_sigterm_during_the_drain_puts_the_host_back_on_the_live_generation(slot: Slot) -> None:
    app = slot.write(slot_extra=blue_green(slot, '"60s"'))
    rolled(slot.cli("deploy", "test1"))
    [g1] = names(slot)
    proc = slot.start_deploy("registry.example/shop:2")
    try:
        g2 = wait_switched(slot, g1)  # pointed and dropped; now draining before the sleep
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 143, out
    assert "interrupted by SIGTERM: r2 marked failed; restoring r1" in out
    assert f"Service shop-web-{g1} re-created from r1" in out
    assert "interrupted: restoring r1 done; the lock is released" in out
    assert backend_service(slot) == f"shop-web-{g1}"
    assert states(slot) == {g1: "live", g2: "asleep"}
    assert slot.statuses(app) == {1: "deployed", 2: "failed"}


def test_a_switch_killed_during_the_drain_is_recovered_onto_the_anchor_generation(
    slot: Slot,
) -> None:
    app = slot.write(slot_extra=blue_green(slot, '"60s"'))
    rolled(slot.cli("deploy", "test1"))
    [g1] = names(slot)
    proc = slot.start_deploy("registry.example/shop:2")
    try:
        g2 = wait_switched(slot, g1)
        proc.kill()  # SIGKILL: no handler runs; the Lease and the pending record stay
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert slot.statuses(app)[2] == "pending"
    assert backend_service(slot) == f"shop-web-{g2}"
    held = slot.client.get(Lease, lease_name("shop", "test1"), namespace=slot.namespace)
    held.spec.renewTime = datetime.now(UTC) - timedelta(seconds=300)  # time passes
    slot.client.replace(held)
    slot.edit('sleep_after = "60s"', "sleep_after = 0")

    out = rolled(slot.cli("deploy", "test1", "--image", "registry.example/shop:3"))
    assert "recovering: r2 was left pending by an interrupted operation" in out
    assert "re-asserting r1, the deployed release" in out
    assert f"re-assert [5/8] point {host(slot)} at web generation {g1}" in out
    assert "rolled shop/test1 from r1 to r3" in out
    g3 = str(slot.records(app)[3].generation)
    assert states(slot) == {g1: "asleep", g2: "asleep", g3: "live"}
    assert backend_service(slot) == f"shop-web-{g3}"
    assert slot.statuses(app) == {1: "superseded", 2: "failed", 3: "deployed"}


def test_repair_puts_back_what_drifted_in_the_live_generation_only(slot: Slot) -> None:
    app = slot.write(slot_extra=blue_green(slot))
    slot.deploy(app)
    slot.deploy(app, image="registry.example/shop:2")
    g1, g2 = names(slot)
    kept = of_generation(slot, g1)
    route = ingress(slot).metadata.resourceVersion
    slot.client.delete(Deployment, f"shop-web-{g2}", namespace=slot.namespace)

    saved = slot.directory / "repair.json"
    assert slot.cli("plan", "test1", "--repair", "--out", str(saved)).returncode == 0
    out = rolled(slot.cli("repair", "test1", "--plan", str(saved)))
    assert f"create Deployment/shop-web-{g2}" in out
    assert "remove " not in out and "Namespace/" not in out
    web = slot.deployment(f"shop-web-{g2}")
    assert web.spec.replicas == 2 and web.status.availableReplicas == 2  # the declared count
    assert of_generation(slot, g1) == kept  # the asleep generation is not drift
    assert ingress(slot).metadata.resourceVersion == route
    assert states(slot) == {g1: "asleep", g2: "live"}
    assert slot.records(app)[3].generation == g2
