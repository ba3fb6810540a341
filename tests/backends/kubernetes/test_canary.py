"""Canary releases on Kubernetes: a Gateway API implementation splits, Prometheus counts.

On the test plane's real node, with the Traefik and the Prometheus ``scripts/k8s-testenv``
runs on this host (the Gateway ``SHIPWAY_TEST_GATEWAY``; Traefik sends requests straight to
pod addresses): a request loop goes through Traefik to the slot's host while shipway runs
the canary. The app is the testenv's ``web`` image: with ``UP_STATUS = "500"`` its ``/up``
answers 500 and everything else 200, so a release whose health gate (``/``) passes still
fails every request the loop sends (``/up``) — a broken canary.

Where no Gateway API implementation accepts the Gateway the spec names, or the Gateway is
not there, the deploy is refused before anything is touched (exit 2): tested with a
GatewayClass no controller takes, created here.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Secret, Service
from lightkube.types import PatchType

from shipway.backends.kubernetes import gateway as gw
from shipway.backends.kubernetes.lease import lease_name
from shipway.backends.protocol import Reason
from shipway.engine.outcome import Rolled, RolledBack
from shipway.errors import InputError
from shipway.guard import Guard
from tests.backends.local.conftest import eventually
from tests.canary_spec import canary_table
from tests.loops import RequestLoop

from .conftest import Slot
from .test_real_pods import WEB, image

GatewayClass = create_global_resource(gw.GROUP, "v1", "GatewayClass", "gatewayclasses")

# the real-pod tests' app, its health gate on "/" (a broken canary's "/up" answers 500)
SPEC = (
    WEB.replace('path = "/up"', 'path = "/"')
    + 'strategy = "canary"\n\n'
    + canary_table("test1", "{step_time}", 5, gateway="{gateway}", prometheus="{prometheus}")
    + """
[env]
UP_STATUS = "{up_status}"

[[routes]]
host = "{host}"
process = "web"
"""
)



def gateway_env() -> tuple[str, str, str]:
    names = ("SHIPWAY_TEST_GATEWAY", "SHIPWAY_TEST_GATEWAY_URL", "SHIPWAY_TEST_PROMETHEUS")
    values = [os.environ.get(n, "") for n in names]
    if not all(values):
        pytest.fail("the Gateway's environment is not set: eval scripts/k8s-testenv env")
    return values[0], values[1], values[2]


def write(
    slot: Slot, tag: str, up_status: str = "200", gateway: str | None = None, step_time: str = "1s"
) -> Any:
    # a refusal is decided before Prometheus is asked: it needs no gateway of the testenv's
    ref, _, prometheus = gateway_env() if gateway is None else ("", "", "http://127.0.0.1:9")
    name = "cn" + slot.namespace[-6:]
    return slot.write(
        SPEC,
        name=name,
        image=image(tag),
        up_status=up_status,
        host=f"{name}.canary.test",
        gateway=gateway or ref,
        prometheus=prometheus,
        step_time=step_time,
    )


def ask(
    host: str, path: str, timeout: float = 5, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    _, url, _ = gateway_env()
    request = urllib.request.Request(f"{url}{path}", headers={"Host": host, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace").strip()


def load(host: str) -> RequestLoop:
    """Requests to ``/up`` through the Gateway, about 25 a second, until the block ends."""
    return RequestLoop(lambda _: ask(host, "/up"), rate=25)


def seen(loop: RequestLoop) -> dict[str, int]:
    return dict(Counter(f"{a.status} {a.body}" for a in loop.answers))


def route_of(slot: Slot, app: Any) -> dict[str, Any]:
    name = gw.route_name(app.name, app.routes[0].host)
    return dict(slot.client.get(gw.HTTPRoute, name, namespace=slot.namespace).to_dict())


def canary_deployments(slot: Slot) -> list[str]:
    return [
        str(d.metadata.name)
        for d in slot.client.list(Deployment, namespace=slot.namespace)
        if d.metadata is not None and str(d.metadata.name).endswith(gw.SUFFIX)
    ]


def all_to_stable(route: dict[str, Any], stable: str) -> bool:
    rules = route["spec"]["rules"]
    refs = [r for rule in rules for r in rule.get("backendRefs") or []]
    return [(r["name"], r.get("weight")) for r in refs] == [(stable, 100)] and gw.CANARY not in (
        route["metadata"].get("annotations") or {}
    )


pytestmark = [pytest.mark.k8s, pytest.mark.real_node, pytest.mark.xdist_group("real_node_load")]


def deployed_v1(slot: Slot) -> Any:
    """The first release (no canary: nothing to compare), served through the Gateway: the
    host's HTTPRoute is applied with its Ingress, every request to the stable Service."""
    app = write(slot, "v1")
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    assert "no canary: no host served by a stable release moves" in lines.text, lines.text
    assert all_to_stable(route_of(slot, app), f"{app.name}-web")
    eventually(lambda: ask(app.routes[0].host, "/version") == (200, "v1"), what="v1 served")
    return app


def aborted_at_first_share(outcome: Any, lines: Any, loop: RequestLoop) -> list[Any]:
    """The deploy's outcome is an abort at 10 % with the counts that decided; the loop's
    answers of 500 (the broken canary's)."""
    print(lines.text)
    print(seen(loop))
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason == Reason.CANARY_ABORTED, outcome.failure
    said = " ".join([outcome.failure.message, *outcome.failure.details])
    assert "aborted at 10%" in said, said
    assert "canary: " in said and "stable: " in said, said  # the counts that decided
    return [a for a in loop.answers if a.status == 500]


def test_a_broken_canary_is_aborted_from_the_gateways_counts(real_slot: Slot) -> None:
    deployed_v1(real_slot)
    app = write(real_slot, "v2", up_status="500")
    host = app.routes[0].host
    with load(host) as loop:
        outcome, lines = real_slot.deploy(app)
        aborted_at = time.monotonic()
        # after the abort: the stable alone answers
        eventually(lambda: ask(host, "/up") == (200, "ok"), what="the stable answers /up")
    bad = aborted_at_first_share(outcome, lines, loop)
    assert bad, "the canary got no request: the HTTPRoute did not split"
    assert len(bad) <= 30, len(bad)  # 3 counted decide; Prometheus scrapes every second
    late = [a for a in bad if a.began > aborted_at + 2]
    assert late == [], late  # nothing reached the canary once it was aborted
    assert [a for a in loop.failed() if a.status != 500] == []  # no other failure
    stable = f"{app.name}-web"
    assert all_to_stable(route_of(real_slot, app), stable)
    eventually(lambda: canary_deployments(real_slot) == [], what="the canary's Deployment gone")
    assert real_slot.statuses(app) == {1: "deployed", 2: "failed"}


def test_a_crash_looping_canary_fails_its_first_share_from_its_pods(real_slot: Slot) -> None:
    """The new release's app exits 3 on start (the testenv's ``crash`` image): the pod wait
    that gates the canary's first share watches the canary's pods (component
    ``web-canary``) and fails at the crash loop with the pod's own reason, exit code and
    last words — not at the gate's 300 s timeout — before any route splits: every request
    through the Gateway is the stable's, and the canary's Deployment is removed."""
    app = deployed_v1(real_slot)
    host = app.routes[0].host
    app = write(real_slot, "crash")
    with RequestLoop(lambda _: ask(host, "/version"), rate=25) as loop:
        started = time.monotonic()
        outcome, lines = real_slot.deploy(app)
        took = time.monotonic() - started
        eventually(lambda: canary_deployments(real_slot) == [], what="the canary's Deployment gone")
        after = loop.done
        eventually(lambda: loop.done >= after + 25, what="requests after the rollback")
    print(lines.text)
    print(f"failed after {took:.1f}s; {seen(loop)}")
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.exit_code == 10 and outcome.to_revision == 1, outcome
    failure = outcome.failure
    said = "\n".join([outcome.line(), *outcome.details()])  # what the user is told
    # the rollout watch's own reason (a normal rollout's: test_real_pods.py), from the pod
    assert failure.reason == "CrashLoopBackOff", said
    assert failure.exit_code == 3, said  # what the app's script exits with
    assert "CRASH_ON_START is set, exiting 3" in said, said  # its log tail
    assert f"{app.name}-web-canary-" in failure.message, said  # the pod it read
    assert "canary" in said.split("\n")[0], said  # the headline says it was the canary
    assert took < 120, took  # at the crash loop, not at the gate's 300 s timeout
    # no request reached the crashing release: the stable answered every one
    assert loop.done > 0 and loop.failed("v1") == [], seen(loop)
    assert all_to_stable(route_of(real_slot, app), f"{app.name}-web")
    assert real_slot.statuses(app) == {1: "deployed", 2: "failed"}


def test_a_good_canary_is_promoted_to_all_requests(real_slot: Slot) -> None:
    deployed_v1(real_slot)
    app = write(real_slot, "v2")
    host = app.routes[0].host
    with load(host) as loop:
        outcome, lines = real_slot.deploy(app)
    print(lines.text)
    print(seen(loop))
    assert isinstance(outcome, Rolled), lines.text
    for percent in (10, 50):
        assert f"canary {percent}%:" in lines.text and "promote" in lines.text, lines.text
    assert loop.failed() == [], loop.failed()[:5]
    # the old stable pod drains (its preStop sleep) while the Gateway takes it out
    eventually(lambda: ask(host, "/version") == (200, "v2"), what="v2 answering")
    assert all_to_stable(route_of(real_slot, app), f"{app.name}-web")
    eventually(lambda: canary_deployments(real_slot) == [], what="the canary's Deployment gone")
    assert real_slot.statuses(app) == {1: "superseded", 2: "deployed"}


def serves_gateway_api(slot: Slot) -> bool:
    try:
        list(slot.client.list(gw.HTTPRoute, namespace=slot.namespace))
    except (ApiError, httpx2.HTTPStatusError) as exc:
        code = exc.status.code if isinstance(exc, ApiError) else exc.response.status_code
        if code == 404:  # the kind is not served: no CRD
            return False
        raise
    return True


def test_a_cluster_without_the_gateway_api_refuses_the_canary(
    slot: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = f"{slot.namespace}/web"
    why = "the cluster serves no Gateway API (no HTTPRoute kind)"
    if not serves_gateway_api(slot):  # a plane `up` has not given the CRDs: as it is
        done = check_refused(slot, ref, why)
        assert "a canary cannot be run in slot 'test1'" in done.stderr, done.stderr
        return
    # this plane serves the Gateway API: ask the API server for a version of the kind it
    # does not serve (its answer is the one a cluster without the CRDs gives: a bare 404)
    unserved = create_namespaced_resource(gw.GROUP, "v0shipway", "HTTPRoute", "httproutes")
    monkeypatch.setattr(gw, "HTTPRoute", unserved)
    app = write(slot, "v1", gateway=ref)
    with pytest.raises(InputError, match=r"a canary cannot be run in slot 'test1'.*no Gateway API"):
        slot.deploy(app)
    assert list(slot.client.list(Deployment, namespace=slot.namespace)) == []


@pytest.mark.parametrize("verdict", ["abort", "promote"])
def test_a_canary_left_by_a_killed_deploy_ends_with_one_release_serving(
    real_slot: Slot, verdict: str
) -> None:
    slot = real_slot
    app = killed_at_first_share(slot)
    host = app.routes[0].host
    # left behind: the split goes on, the tester's header reaches the canary
    assert ask(host, "/version", headers={gw.HEADER: "always"}) == (200, "v2")
    assert slot.statuses(app)[2] == "pending"

    done = slot.cli("canary", verdict, "test1")
    print(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    serving, status = ("v1", "failed") if verdict == "abort" else ("v2", "deployed")
    # the old pods drain (their preStop sleep) while the Gateway takes them out: then the
    # one release alone answers
    eventually(
        lambda: {ask(host, "/version")[1] for _ in range(10)} == {serving},
        what=f"{serving} alone answering",
    )
    assert {ask(host, "/version")[1] for _ in range(20)} == {serving}
    assert all_to_stable(route_of(slot, app), f"{app.name}-web")
    eventually(lambda: canary_deployments(slot) == [], what="the canary's Deployment gone")
    assert slot.statuses(app)[2] == status


def killed_at_first_share(slot: Slot) -> Any:
    """v1 deployed, then a deploy of v2 killed (SIGKILL) while its canary holds 10 %:
    its objects, its route's split, its notes and its Lease (expired since) are left."""
    deployed_v1(slot)
    app = write(slot, "v2", step_time="10m")  # the canary holds its first share
    host = app.routes[0].host
    proc = slot.start_deploy(image("v2"))
    try:
        eventually(  # the canary's share in the HTTPRoute, taken by the Gateway
            lambda: ask(host, "/version", headers={gw.HEADER: "always"}) == (200, "v2"),
            timeout=180,
            what="the tester's header reaching the canary",
        )
        status = json.loads(slot.cli("canary", "status", "test1", "-o", "json").stdout)
        assert status["running"] and status["percent"] == 10, status
        assert status["counts"]["canary"] == f"{app.name}.test1.r2", status
        # the deploy's first state note written (status reads the route's share, which
        # comes first), so the kill leaves a note behind as well
        instance = f"{app.name}-test1"
        eventually(lambda: list(slot.client.list(ConfigMap, namespace=slot.namespace,
                                                 labels={gw.NOTES_LABEL: instance})),
                   what="the canary's notes")  # fmt: skip
        proc.kill()  # SIGKILL: no handler runs; the Lease and the pending record stay
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    held = slot.client.get(Lease, lease_name(app.name, "test1"), namespace=slot.namespace)
    held.spec.renewTime = datetime.now(UTC) - timedelta(seconds=300)  # time passes
    slot.client.replace(held)
    return app


def test_destroy_leaves_nothing_of_a_canary_slot(real_slot: Slot) -> None:
    """Destroyed in the middle of a canary (its deploy killed): the HTTPRoute, the canary's
    Deployment and Service, its notes and every other object of the slot are gone."""
    slot = real_slot
    app = killed_at_first_share(slot)
    instance = f"{app.name}-test1"
    notes = list(slot.client.list(ConfigMap, namespace=slot.namespace,
                                  labels={gw.NOTES_LABEL: instance}))  # fmt: skip
    assert [n.metadata.name for n in notes] == [f"{instance}-canary-notes"]
    assert canary_deployments(slot) != [] and route_of(slot, app)

    done = slot.cli("destroy", "test1", "--confirm", "test1")
    print(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    route = gw.route_name(app.name, app.routes[0].host)
    assert f"deleted HTTPRoute {route}" in done.stdout, done.stdout
    # on the API server: nothing of the app (Deployments go in the background)
    left = {
        kind.__name__: [o.metadata.name for o in slot.client.list(kind, namespace=slot.namespace)]
        for kind in (gw.HTTPRoute, Service, ConfigMap, Secret, Lease)
    }
    left["ConfigMap"] = [n for n in left["ConfigMap"] if n != "kube-root-ca.crt"]
    assert left == {k: [] for k in left}, left
    eventually(
        lambda: list(slot.client.list(Deployment, namespace=slot.namespace)) == [],
        what="the Deployments gone",
    )
    # the Gateway takes the route's deletion from its watch: then it routes the host nowhere
    eventually(lambda: ask(app.routes[0].host, "/version")[0] == 404, what="the host unrouted")


def test_an_app_without_routes_refuses_the_canary(slot: Slot) -> None:
    write(slot, "v1", gateway=f"{slot.namespace}/nope")
    slot.spec_file.write_text(slot.spec_file.read_text().split("[[routes]]")[0])
    app = slot.app()
    with pytest.raises(InputError, match="the app has no route: no request to split"):
        slot.deploy(app)
    assert list(slot.client.list(Deployment, namespace=slot.namespace)) == []


@pytest.mark.parametrize("gateway", ["missing", "unaccepted"])
def test_no_gateway_api_implementation_refuses_the_canary(slot: Slot, gateway: str) -> None:
    if not serves_gateway_api(slot):
        pytest.fail("the plane serves no Gateway API: run scripts/k8s-testenv up")
    ref = f"{slot.namespace}/nope"
    if gateway == "unaccepted":  # a Gateway of a class no controller takes
        cls = f"shipway-none-{slot.namespace}"[:63]
        nobody = {"controllerName": "example.com/none"}
        slot.client.create(GatewayClass({"metadata": {"name": cls}, "spec": nobody}))
        try:
            body = {
                "metadata": {"name": "nope", "namespace": slot.namespace},
                "spec": {
                    "gatewayClassName": cls,
                    "listeners": [{"name": "web", "port": 80, "protocol": "HTTP"}],
                },
            }
            slot.client.create(gw.Gateway(body))
            done = check_refused(slot, ref, "no Gateway API implementation accepted")
        finally:
            slot.client.delete(GatewayClass, cls)
    else:
        done = check_refused(slot, ref, f"there is no Gateway {ref}")
    assert "a canary cannot be run in slot 'test1'" in done.stderr, done.stderr


def check_refused(slot: Slot, ref: str, why: str) -> Any:
    write(slot, "v1", gateway=ref)
    done = slot.cli("deploy", "test1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert why in done.stderr, done.stderr
    # nothing touched: no workload, no record
    assert list(slot.client.list(Deployment, namespace=slot.namespace)) == []
    plan = slot.cli("plan", "test1")
    assert plan.returncode == 2 and why in plan.stderr, plan.stdout + plan.stderr
    return done


# -- stickiness: the canary's cookie ---------------------------------------------------


def answer(host: str, cookie: str | None = None) -> tuple[str, list[str]]:
    """``/version``'s answer through the Gateway (``cookie``: the Cookie header sent), and
    the cookies it sets."""
    _, url, _ = gateway_env()
    headers = {"Host": host, **({"Cookie": cookie} if cookie else {})}
    request = urllib.request.Request(f"{url}/version", headers=headers)
    with urllib.request.urlopen(request, timeout=5) as got:
        return got.read().decode().strip(), list(got.headers.get_all("Set-Cookie") or [])


def served(host: str, cookie: str | None, n: int = 40) -> dict[str, int]:
    return dict(Counter(answer(host, cookie)[0] for _ in range(n)))


def share_taken(slot: Slot, app: Any, percent: int) -> bool:
    """The route carries ``percent`` and the Gateway took it as it is."""
    route = route_of(slot, app)
    annotations = route["metadata"].get("annotations") or {}
    ok, _ = gw.route_state(route, gateway_env()[0])
    return ok and annotations.get(gw.PERCENT) == str(percent)


def gateway_keeps_clients(slot: Slot) -> bool:
    """What the testenv's GatewayClass declares (Traefik v3.6.12: no backendRef filters)."""
    ns, name = gw.split_gateway(gateway_env()[0])
    cls = slot.client.get(gw.Gateway, name, namespace=ns).to_dict()["spec"]["gatewayClassName"]
    return gw.keeps_clients(slot.client.get(gw.GatewayClass, cls).to_dict())


@pytest.mark.parametrize("verdict", ["promote", "abort"])
def test_a_client_with_the_canarys_cookie_stays_on_its_release(
    real_slot: Slot, verdict: str
) -> None:
    """A client holding the cookie of one side is served by that side at every share; a
    client without one lands by weight (and gets the cookie of its side where the Gateway's
    implementation runs a backendRef's filters; the plan says which); after the canary
    ends, the cookie does no harm: the one release answers every request."""
    began = time.monotonic()
    slot = real_slot
    deployed_v1(slot)
    app = write(slot, "v2", step_time="10m")  # each share held until promoted by hand
    host = app.routes[0].host
    sticky = gateway_keeps_clients(slot)
    plan = slot.cli("plan", "test1")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    said = "sticky by cookie" if sticky else "each request split by weight (the Gateway's"
    assert f"send 10% of requests to the new release (the canary), {said}" in plan.stdout
    ident = f"{app.name}.test1.r2"
    on_canary, on_stable = (f"{gw.COOKIE}={ident}.{side}" for side in ("canary", "stable"))
    proc = slot.start_deploy(image("v2"))
    try:
        for percent in (10, 50):
            eventually(lambda p=percent: share_taken(slot, app, p), timeout=180,
                       what=f"the {percent}% share taken by the Gateway")  # fmt: skip
            split = route_of(slot, app)["spec"]["rules"][-1]["backendRefs"]
            assert [bool(ref.get("filters")) for ref in split] == [sticky, sticky], split
            # Traefik writes the route's status before its router runs the new rules (its
            # providers' throttle): the tester's header reaching the canary says they run
            # (the cookie rules are the same at every share of this canary)
            eventually(lambda: ask(host, "/version", headers={gw.HEADER: "always"})
                       == (200, "v2"), what="the canary's rules running")  # fmt: skip
            assert served(host, on_canary) == {"v2": 40}
            assert served(host, f"a=1; {on_stable}; b=2") == {"v1": 40}
            # without a cookie (or with an earlier canary's): by weight
            landed = [answer(host) for _ in range(40)]
            assert {body for body, _ in landed} <= {"v1", "v2"}, landed
            for body, cookies in landed:
                side = "canary" if body == "v2" else "stable"
                expected = [c for c in cookies if c.startswith(f"{gw.COOKIE}={ident}.{side};")]
                assert (len(expected) == 1) if sticky else (cookies == []), (body, cookies)
            answer(host, f"{gw.COOKIE}={app.name}.test1.r1.canary")  # an earlier canary's: 200
            done = slot.cli("canary", verdict if percent == 50 else "promote", "test1")
            assert done.returncode == 0, done.stdout + done.stderr
            # the deploy took the decision (not the command acting on a canary it took for
            # left behind, which would skip the next share)
            assert "took it" in done.stdout, done.stdout + done.stderr
        # before the test's own 300 s end, so a deploy that does not end says what it did
        out, _ = proc.communicate(timeout=max(10.0, 285 - (time.monotonic() - began)))
    except (AssertionError, subprocess.TimeoutExpired) as exc:  # what the deploy said: why
        proc.kill()
        said, _ = proc.communicate(timeout=30)
        raise AssertionError(f"{exc}\n--- the deploy's output ---\n{said}") from exc
    finally:
        proc.kill()
    print(out)
    assert proc.returncode == (0 if verdict == "promote" else 10), out
    serving = "v2" if verdict == "promote" else "v1"
    eventually(
        lambda: {answer(host, c)[0] for c in (on_canary, on_stable) for _ in range(5)}
        == {serving},
        what=f"{serving} alone answering",
    )
    for cookie in (on_canary, on_stable, None):
        assert served(host, cookie, 20) == {serving: 20}
    assert all_to_stable(route_of(slot, app), f"{app.name}-web")


def declared(features: list[str]) -> dict[str, Any]:
    """A status as an implementation writes it (here by hand: no controller takes the class)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    accepted = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                "lastTransitionTime": now, "observedGeneration": 1}  # fmt: skip
    out: dict[str, Any] = {"conditions": [accepted]}
    if features:
        out["supportedFeatures"] = [{"name": f} for f in features]
    return {"status": out}


def test_the_plan_is_sticky_where_the_gateway_class_declares_backend_filters(
    slot: Slot, mint_kubeconfig: Callable[..., Path]
) -> None:
    """The plan's wording comes from the Gateway's class: one that declares a backendRef's
    filters gets ``sticky by cookie`` (a class and a Gateway whose statuses are written
    here, as an implementation that runs them would); an identity that may not read the
    class (a namespace's Role), or a class that does not declare them, gets the split by
    weight."""
    if not serves_gateway_api(slot):
        pytest.fail("the plane serves no Gateway API: run scripts/k8s-testenv up")
    cls = f"shipway-declares-{slot.namespace}"[:63]
    slot.client.create(GatewayClass({"metadata": {"name": cls},
                                     "spec": {"controllerName": "example.com/none"}}))  # fmt: skip
    try:
        features = ["HTTPRoute", gw.RESPONSE_HEADERS, gw.BACKEND_FILTERS]
        slot.client.patch(GatewayClass.Status, cls, declared(features), patch_type=PatchType.MERGE)
        listener = {"name": "web", "port": 80, "protocol": "HTTP"}
        body = {"metadata": {"name": "sticky", "namespace": slot.namespace},
                "spec": {"gatewayClassName": cls, "listeners": [listener]}}  # fmt: skip
        slot.client.create(gw.Gateway(body))
        slot.client.patch(gw.Gateway.Status, "sticky", declared([]), namespace=slot.namespace,
                          patch_type=PatchType.MERGE)  # fmt: skip
        _, _, prometheus = gateway_env()
        name = "cn" + slot.namespace[-6:]
        app = slot.write(SPEC, name=name, image=image("v1"), up_status="200",
                         host=f"{name}.canary.test", gateway=f"{slot.namespace}/sticky",
                         prometheus=prometheus, step_time="1s")  # fmt: skip
        outcome, lines = slot.deploy(app)  # the first release: no canary, nothing to compare
        assert isinstance(outcome, Rolled), lines.text
        slot.write(SPEC, name=name, image=image("v2"), up_status="200",
                   host=f"{name}.canary.test", gateway=f"{slot.namespace}/sticky",
                   prometheus=prometheus, step_time="1s")  # fmt: skip
        in_namespace = {"KUBECONFIG": str(mint_kubeconfig(slot.namespace, name="deployer"))}
        for sticky, env in ((True, None), (False, in_namespace), (False, None)):
            if not sticky and env is None:  # the class no longer declares them
                slot.client.patch(GatewayClass.Status, cls, declared(["HTTPRoute"]),
                                  patch_type=PatchType.MERGE)  # fmt: skip
            plan = slot.cli("plan", "test1", env=env)
            assert plan.returncode == 0, plan.stdout + plan.stderr
            how = "sticky by cookie" if sticky else "each request split by weight (the Gateway's"
            for percent in (10, 50):
                line = f"send {percent}% of requests to the new release (the canary), {how}"
                assert line in plan.stdout, plan.stdout
    finally:
        slot.client.delete(GatewayClass, cls)


# -- every routed process counted ------------------------------------------------------

TWO = (
    SPEC.replace('process = "web"\n', 'process = "web"\n\n[[routes]]\nhost = "{api_host}"\n'
                 'process = "api"\n')
    + """
[processes.api]
port = 8080
replicas = 1
command = "{api_command}"
healthcheck = {{ path = "/", interval = "1s", timeout = "1s", attempts = 3 }}
"""
)  # fmt: skip


def write_two(slot: Slot, tag: str, api_up_status: str) -> Any:
    ref, _, prometheus = gateway_env()
    name = "cn" + slot.namespace[-6:]
    return slot.write(
        TWO,
        name=name,
        image=image(tag),
        up_status="200",
        host=f"{name}.canary.test",
        api_host=f"second-{name}.canary.test",  # its route listed second
        api_command=f"env UP_STATUS={api_up_status} /app/serve",
        gateway=ref,
        prometheus=prometheus,
        step_time="1s",
    )


def test_a_broken_canary_of_a_second_routed_process_is_aborted(real_slot: Slot) -> None:
    """Both routed processes' Services are counted: the first process's canary is good,
    the second's answers 500 on ``/up``; the canary is aborted on the second's answers."""
    app = write_two(real_slot, "v1", "200")
    outcome, lines = real_slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    web, api = (route.host for route in app.routes)
    # both hosts served before the loop: the Gateway may answer 503 "no available server"
    # for a host whose route it took before the Service listed pods, for a second or more
    for host in (web, api):
        eventually(lambda h=host: ask(h, "/version") == (200, "v1"), what=f"v1 served on {host}")
    app = write_two(real_slot, "v2", "500")
    both = RequestLoop(lambda i: ask((web, api)[i % 2], "/up"), rate=25)
    with both as loop:
        outcome, lines = real_slot.deploy(app)
        eventually(lambda: ask(api, "/up") == (200, "ok"), what="the stable api answers /up")
    bad = aborted_at_first_share(outcome, lines, loop)
    assert bad, "the api's canary got no request"
    assert [a for a in loop.failed() if a.status != 500] == []
    for route, process in zip(app.routes, ("web", "api"), strict=True):
        name = gw.route_name(app.name, route.host)
        body = real_slot.client.get(gw.HTTPRoute, name, namespace=real_slot.namespace).to_dict()
        assert all_to_stable(body, f"{app.name}-{process}")
    eventually(lambda: canary_deployments(real_slot) == [], what="the canaries' Deployments gone")
    assert real_slot.statuses(app) == {1: "deployed", 2: "failed"}


def test_a_decision_noted_while_the_deploy_notes_its_state_is_kept(
    slot: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person's ``canary promote`` writes the decision while the deploy writes its state
    note (two processes, one map of notes): neither write undoes the other. The deploy's
    write once read the whole map and wrote it back, so a decision written in between was
    lost, the command took it for taken, and the deploy held its share (a whole run's cookie
    canary test, waiting for the 50% share)."""
    app = write(slot, "v1", gateway=f"{slot.namespace}/nope")
    target = app.slots.target("test1")
    clearance = Guard(app.slots).clear("test1")
    deploying, person = slot.backend(app), slot.backend(app)
    decision = {"canary": "x.test1.r2", "verdict": "promote", "actor": "someone"}
    deploying.canary_note(clearance, target, "state", {"step": 1})
    written: list[str] = []

    def in_between() -> None:  # once: the person's decision, amid the deploy's write
        if not written:
            written.append("decision")
            person.canary_note(clearance, target, "decision", decision)

    client, get, patch, apply = (deploying.client, deploying.client.get,
                                 deploying.client.patch, deploying.client.apply)  # fmt: skip

    def read_then(*args: Any, **kwargs: Any) -> Any:
        got = get(*args, **kwargs)
        in_between()
        return got

    def then(call: Any) -> Any:
        def write_after(*args: Any, **kwargs: Any) -> Any:
            in_between()
            return call(*args, **kwargs)

        return write_after

    monkeypatch.setattr(client, "get", read_then)
    monkeypatch.setattr(client, "patch", then(patch))
    monkeypatch.setattr(client, "apply", then(apply))
    deploying.canary_note(clearance, target, "state", {"step": 2})
    monkeypatch.undo()
    assert written == ["decision"]
    assert person.read_canary_note(target, "decision") == decision
    assert person.read_canary_note(target, "state") == {"step": 2}
    # and the deploy's removal of the decision it took leaves its state
    deploying.canary_note(clearance, target, "decision", None)
    assert person.read_canary_note(target, "decision") is None
    assert person.read_canary_note(target, "state") == {"step": 2}
