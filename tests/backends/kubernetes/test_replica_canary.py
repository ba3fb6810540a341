"""A replica-ratio canary on Kubernetes (``split = "replicas"``): no router, no counts.

On the test plane's real node: the app is the testenv's ``web`` image with 2 stable pods;
the canary's pods run beside them behind the stable Service, so kube-proxy sends each
connection to one of 3 (10 % asked: 1 canary pod, a third of the requests) or 4 pods (50 %:
2). Requests go to the Service's ClusterIP from this host (kube-proxy's rules), one new
connection each. A crash-looping canary passes its gate, serves, then exits: the held step's
pod watch aborts it and every pod runs the stable release again.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from shipway.backends.kubernetes import gateway as gw
from shipway.backends.protocol import Reason
from shipway.engine.outcome import RolledBack
from tests.backends.local.conftest import eventually
from tests.loops import RequestLoop

from .conftest import Slot
from .test_rbac import documented_role
from .test_real_pods import WEB, get, image

SPEC = (
    WEB.replace('path = "/up"', 'path = "/"').replace("replicas = 1", "replicas = 2")
    + 'strategy = "canary"\n\n'
    + """[slots.test1.canary]
split = "replicas"
steps = [10, 50, 100]
step_time = "{step_time}"
at_timeout = "promote"

[[routes]]
host = "{host}"
process = "web"
"""
)
#: a release that serves, then gives up (exit 3) 15 s after each start: past its gate
GIVES_UP = (
    'replicas = 2\ncommand = ["sh", "-c", "/app/serve & sleep 15; '
    'echo canary giving up >&2; exit 3"]\n'
)

pytestmark = [pytest.mark.k8s, pytest.mark.real_node, pytest.mark.xdist_group("real_node_load")]


def write(slot: Slot, tag: str, step_time: str = "1s", crash: bool = False) -> Any:
    name = "rc" + slot.namespace[-6:]
    text = SPEC.replace("replicas = 2\n", GIVES_UP) if crash else SPEC
    return slot.write(
        text, name=name, image=image(tag), host=f"{name}.replicas.test", step_time=step_time
    )


def service_url(slot: Slot, app: Any) -> str:
    service = slot.client.get(Service, f"{app.name}-web", namespace=slot.namespace)
    assert service.spec is not None and service.spec.ports
    return f"http://{service.spec.clusterIP}:{service.spec.ports[0].port}"


def version(url: str) -> tuple[int, str]:
    status, body = get(f"{url}/version")
    return status, body.strip()


def versions(url: str, n: int) -> Counter[str]:
    """``n`` requests to the Service, a new connection each: the versions that answered."""
    return Counter(version(url)[1] for _ in range(n))


def canary_deployments(slot: Slot) -> list[str]:
    return [
        str(d.metadata.name)
        for d in slot.client.list(Deployment, namespace=slot.namespace)
        if d.metadata is not None and str(d.metadata.name).endswith(gw.SUFFIX)
    ]


def pod_images(slot: Slot) -> set[str]:
    """The image of every pod of the namespace (terminating ones too)."""
    return {
        p.spec.containers[0].image.split("@")[0]
        for p in slot.client.list(Pod, namespace=slot.namespace)
        if p.spec is not None
    }


def deployed_v1(slot: Slot) -> tuple[Any, str]:
    app = write(slot, "v1")
    outcome, lines = slot.deploy(app)
    assert outcome.ok, lines.text
    assert "no canary: no host served by a stable release moves" in lines.text, lines.text
    url = service_url(slot, app)
    eventually(lambda: version(url) == (200, "v1"), what="v1 served through the Service")
    return app, url


def started(slot: Slot, tag: str) -> subprocess.Popen[str]:
    return slot.start_deploy(image(tag))


def at_share(slot: Slot, percent: int) -> dict[str, Any]:
    """``canary status`` once the canary holds ``percent``."""

    def status() -> dict[str, Any] | None:
        done = slot.cli("canary", "status", "test1", "-o", "json")
        doc = json.loads(done.stdout) if done.returncode == 0 else {}
        return doc if doc.get("running") and doc.get("percent") == percent else None

    found: dict[str, Any] = {}
    eventually(lambda: found.update(status() or {}) or bool(found), timeout=180,
               what=f"the canary at {percent}%")  # fmt: skip
    return found


def canary_ready(slot: Slot, app: Any, pods: int, url: str) -> None:
    """Until the canary's Deployment has ``pods`` ready (the share is set before they are),
    the stable Service's endpoints hold them beside the 2 stable pods, and each canary pod
    has answered through it (kube-proxy programs its rules a moment after the endpoints,
    seconds later on a loaded machine: a step's new pod is not in them before)."""
    prefix = f"{app.name}-web{gw.SUFFIX}-"

    def canary_pods() -> set[str]:
        found = slot.client.list(Pod, namespace=slot.namespace)
        names = {str(p.metadata.name) for p in found if p.metadata is not None}
        return {n for n in names if n.startswith(prefix)}

    def answering(n: int) -> set[str]:
        """The pods (HOSTNAME) that answered ``n`` requests through the Service."""
        said = [get(f"{url}/cgi-bin/env")[1] for _ in range(n)]
        lines = [line for body in said for line in body.splitlines()]
        return {line[9:] for line in lines if line.startswith("HOSTNAME=")}

    def ready() -> bool:
        live = slot.client.get(Deployment, f"{app.name}-web{gw.SUFFIX}", namespace=slot.namespace)
        return live.status is not None and (live.status.readyReplicas or 0) == pods

    def endpoints() -> int:
        labels = {"kubernetes.io/service-name": f"{app.name}-web"}
        slices = slot.client.list(EndpointSlice, namespace=slot.namespace, labels=labels)
        every = [e for s in slices for e in s.endpoints or []]
        return sum(1 for e in every if e.conditions is not None and e.conditions.ready)

    eventually(ready, timeout=120, what=f"{pods} canary pods ready")
    eventually(lambda: endpoints() == pods + 2, what=f"{pods + 2} endpoints of the Service")
    eventually(
        lambda: len(canary_pods()) == pods and canary_pods() <= answering(20),
        what=f"each of the {pods} canary pods answering through the Service",
    )


def test_a_good_replica_canary_walks_its_steps_with_requests_on_both_releases(
    real_slot: Slot,
) -> None:
    slot = real_slot
    app, url = deployed_v1(slot)
    write(slot, "v2", step_time="20s")
    plan = slot.cli("plan", "test1", "--image", image("v2"))
    assert plan.returncode == 0, plan.stdout + plan.stderr
    print(plan.stdout)
    assert "replica-ratio canary" in plan.stdout and "no stickiness" in plan.stdout
    assert "about 10% of requests by pod count (web: 1 pod beside 2 (33%))" in plan.stdout

    with RequestLoop(lambda _: version(url), rate=20) as loop:
        began = time.monotonic()
        proc = started(slot, "v2")
        try:
            status = at_share(slot, 10)
            assert status["canary"] == f"{app.name}.test1.r2", status
            canary_ready(slot, app, 1, url)
            # during the step: 1 canary pod beside 2 stable ones behind the one Service
            labels = {gw.CANARY_LABEL: status["canary"]}
            assert len(list(slot.client.list(Pod, namespace=slot.namespace, labels=labels))) == 1
            seen = versions(url, 60)
            print("at 10% (1 canary pod of 3):", dict(seen))
            assert set(seen) == {"v1", "v2"}, seen  # P(no v2 in 60 at 1/3) ~ 3e-11
            assert 5 <= seen["v2"] <= 40, seen
            at_share(slot, 50)
            canary_ready(slot, app, 2, url)
            seen = versions(url, 60)
            print("at 50% (2 canary pods of 4):", dict(seen))
            assert 12 <= seen["v2"] <= 48, seen
            out, _ = proc.communicate(timeout=300)
            print(f"the deploy took {time.monotonic() - began:.1f}s")
        finally:
            proc.kill()
        eventually(lambda: version(url) == (200, "v2"), what="v2 answering")
    print(out)
    print("the loop:", dict(Counter(f"{a.status} {a.body}" for a in loop.answers)))
    assert proc.returncode == 0, out
    assert "canary 10%:" in out and "canary 50%:" in out, out
    assert (
        "promote (inconclusive after 20s, its pods healthy (replica-ratio: no request counts); "
        "at_timeout = 'promote')"
    ) in out, out
    assert "web: 1 pod beside the stable's 2, ready" in out, out
    assert loop.failed() == [], loop.failed()[:5]
    eventually(lambda: canary_deployments(slot) == [], what="the canary's Deployment gone")
    eventually(lambda: pod_images(slot) == {image("v2")}, what="every pod on v2")
    assert slot.statuses(app) == {1: "superseded", 2: "deployed"}


def the_stable_alone(slot: Slot, app: Any, url: str) -> None:
    """Rolled back: the canary's Deployment gone, every pod on v1, v1 alone answering."""
    eventually(lambda: canary_deployments(slot) == [], what="the canary's Deployment gone")
    eventually(lambda: pod_images(slot) == {image("v1")}, timeout=120, what="every pod on v1")
    assert set(versions(url, 20)) == {"v1"}
    assert slot.statuses(app) == {1: "deployed", 2: "failed"}


def test_a_crash_looping_replica_canary_is_aborted_and_the_stable_runs_alone(
    real_slot: Slot,
) -> None:
    slot = real_slot
    app, url = deployed_v1(slot)
    app = write(slot, "v2", step_time="10m", crash=True)
    started_at = time.monotonic()
    outcome, lines = slot.deploy(app)
    took = time.monotonic() - started_at
    print(lines.text)
    assert isinstance(outcome, RolledBack), lines.text
    failure = outcome.failure
    print(failure, took)
    assert failure.reason == Reason.CANARY_ABORTED, failure
    assert "aborted at 10%: the canary's pods are failing" in failure.message, failure
    assert failure.exit_code == 3, failure  # the container's own exit
    assert "canary giving up" in "\n".join(failure.details), failure.details  # its log tail
    assert took < 180, took  # its pods decided it, not the step's 10 minutes
    the_stable_alone(slot, app, url)


def test_a_replica_canary_that_never_starts_fails_its_gate_with_exit_10(
    real_slot: Slot,
) -> None:
    slot = real_slot
    app, url = deployed_v1(slot)
    write(slot, "v2", step_time="10m")
    done = slot.cli("deploy", "test1", "--image", image("crash"))  # exits 3 at each start
    print(done.stdout + done.stderr)
    assert done.returncode == 10, done.stdout + done.stderr  # rolled-back
    said = done.stdout + done.stderr
    # the rollout watch's own failure: its reason, the app's exit code and its log tail
    assert "web (canary): CrashLoopBackOff: the canary is not ready for its 10% share" in said
    assert "(exit code 3)" in said and "CRASH_ON_START is set, exiting 3" in said, said
    the_stable_alone(slot, app, url)


def killed_at_first_share(slot: Slot) -> tuple[Any, str]:
    """v1 deployed, then a deploy of v2 killed (SIGKILL) while its canary holds 10 %."""
    app, url = deployed_v1(slot)
    write(slot, "v2", step_time="10m")
    proc = started(slot, "v2")
    try:
        at_share(slot, 10)
        canary_ready(slot, app, 1, url)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    slot.expire_lease(app.name)  # time passes
    return app, url


@pytest.mark.parametrize("verdict", ["abort", "promote"])
def test_a_replica_canary_left_by_a_killed_deploy_ends_with_one_release(
    real_slot: Slot, verdict: str
) -> None:
    slot = real_slot
    app, url = killed_at_first_share(slot)
    assert canary_deployments(slot) == [f"{app.name}-web-canary"]
    assert set(versions(url, 30)) == {"v1", "v2"}  # left behind: both still serve
    shown = slot.cli("canary", "status", "test1").stdout
    assert "its deploy is gone" in shown, shown
    assert "no per-release counts: a replica-ratio canary" in shown, shown
    done = slot.cli("canary", verdict, "test1")
    print(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
    serving, status = ("v1", "failed") if verdict == "abort" else ("v2", "deployed")
    eventually(lambda: canary_deployments(slot) == [], what="the canary's Deployment gone")
    eventually(lambda: pod_images(slot) == {image(serving)}, timeout=120,
               what=f"every pod on {serving}")  # fmt: skip
    assert set(versions(url, 20)) == {serving}
    assert slot.statuses(app)[2] == status


def test_destroy_leaves_nothing_of_a_replica_canary(real_slot: Slot) -> None:
    slot = real_slot
    killed_at_first_share(slot)
    done = slot.cli("destroy", "test1", "--confirm", "test1")
    assert done.returncode == 0, done.stdout + done.stderr
    eventually(lambda: list(slot.client.list(Deployment, namespace=slot.namespace)) == [],
               what="the Deployments gone")  # fmt: skip
    assert list(slot.client.list(Service, namespace=slot.namespace)) == []


def test_the_documented_role_runs_a_replica_canary_through_its_steps(
    real_slot: Slot, mint_kubeconfig: Callable[..., Path]
) -> None:
    """A deploy by a namespace-scoped ServiceAccount bound to docs/kubernetes.md's Role:
    the canary's Deployment made, scaled through its steps and taken away, the stable's
    moved to the new release — nothing the Role does not grant."""
    slot = real_slot
    kubeconfig = mint_kubeconfig(slot.namespace, documented_role()["rules"], name="deployer")
    env = {"KUBECONFIG": str(kubeconfig)}
    app = write(slot, "v1")
    first = slot.cli("deploy", "test1", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    write(slot, "v2")
    done = slot.cli("deploy", "test1", env=env)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    for share in (10, 50):
        assert f"canary at {share}%" in said or f"{share}%" in said, said
    url = service_url(slot, app)
    eventually(lambda: set(versions(url, 10)) == {"v2"}, what="v2 alone through the Service")
    assert canary_deployments(slot) == []
