"""Real containers on the test plane's real node (kubelet + containerd + kube-proxy).

kwok plays every other pod from stages; these tests are about what only a running container
gives: HTTP answered through a Service, a command's own output and exit code, the
container's log lines, a crash loop with the process's real exit. Images are the Docker
testenv's (``web:*`` in the test registry, pulled by the node's containerd).
"""

from __future__ import annotations

import ipaddress
import os
import threading
import time
import urllib.request

import pytest
from lightkube.resources.core_v1 import Pod, Service

from shipway.engine.outcome import Rolled, RolledBack

from .conftest import Slot

pytestmark = [pytest.mark.k8s, pytest.mark.real_node]

REAL_POD_CIDR = ipaddress.ip_network("10.245.0.0/24")  # scripts/k8s-testenv's real node

WEB = """
[app]
name = "{name}"
image = "{image}"
image_type = "dockerfile"

[processes.web]
port = 8080
replicas = 1
healthcheck = {{ path = "/up", interval = "1s", timeout = "1s", attempts = 3 }}

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"
"""


def image(tag: str) -> str:
    prefix = os.environ.get("SHIPWAY_TEST_IMAGE_PREFIX")
    if not prefix:
        pytest.fail("SHIPWAY_TEST_IMAGE_PREFIX is not set: eval scripts/docker-testenv env")
    return f"{prefix}/web:{tag}"


def app_name(slot: Slot) -> str:
    return "rp" + slot.namespace[-6:]


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


def test_a_real_pod_serves_http_through_its_service(real_slot: Slot) -> None:
    name = app_name(real_slot)
    app = real_slot.write(WEB, name=name, image=image("v1"))
    outcome, lines = real_slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    pods = list(real_slot.client.list(Pod, namespace=real_slot.namespace))
    assert pods, "no pod"
    for pod in pods:  # it ran on the real node, with an address from its CNI bridge
        assert pod.spec is not None and pod.spec.nodeName == real_slot.real_node
        assert pod.status is not None and pod.status.podIP is not None
        assert ipaddress.ip_address(pod.status.podIP) in REAL_POD_CIDR
        statuses = pod.status.containerStatuses or []
        assert statuses and str(statuses[0].containerID).startswith("containerd://")
    # from this host to the ClusterIP: kube-proxy's iptables rules take it to the pod
    assert get_version_through_service(real_slot, name) == (200, "v1")


def test_run_gives_the_commands_real_output_and_exit_code(real_slot: Slot) -> None:
    real_slot.write(WEB, name=app_name(real_slot), image=image("v1"))
    assert real_slot.cli("deploy", "test1").returncode == 0
    script = 'echo "real out $APP_VERSION"; echo "real err" >&2; exit 7'
    done = real_slot.cli("run", "test1", "--", "sh", "-c", script)
    assert done.returncode == 7, done.stdout + done.stderr
    assert "real out v1" in done.stdout
    assert "real err" in done.stderr


def test_logs_show_the_containers_lines(real_slot: Slot) -> None:
    real_slot.write(WEB, name=app_name(real_slot), image=image("v1"))
    assert real_slot.cli("deploy", "test1").returncode == 0
    shown = real_slot.cli("logs", "test1", "web")
    assert shown.returncode == 0, shown.stderr
    # the line /app/serve prints when it starts: only a container that ran has it
    assert "shipway-test app v1: starting on port 8080" in shown.stdout


def test_a_real_crash_loop_fails_fast_with_the_real_reason(real_slot: Slot) -> None:
    app = real_slot.write(WEB, name=app_name(real_slot), image=image("v1"))
    outcome, lines = real_slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    outcome, lines = real_slot.deploy(app, image=image("crash"))
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason == "CrashLoopBackOff", outcome.failure
    assert outcome.failure.exit_code == 3, outcome.failure  # what the app's script exits with
    said = " ".join([outcome.failure.message, *outcome.failure.details])
    # the container's own last words, read from the real log, and its exit code
    assert "CRASH_ON_START is set, exiting 3" in said + lines.text
    status, body = get_version_through_service(real_slot, app.name)
    assert (status, body) == (200, "v1")  # rolled back: v1 still serves


def get_version_through_service(slot: Slot, name: str) -> tuple[int, str]:
    """GET /version at the Service's ClusterIP, once kube-proxy has its rules (it programs
    them within a second or two of the Service's endpoints changing)."""
    service = slot.client.get(Service, f"{name}-web", namespace=slot.namespace)
    assert service.spec is not None and service.spec.ports
    url = f"http://{service.spec.clusterIP}:{service.spec.ports[0].port}/version"
    deadline = time.monotonic() + 15
    while True:
        try:
            status, body = get(url)
            return status, body.strip()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.xfail(
    strict=True,
    reason="found on real pods: an old pod gets SIGTERM and stops listening before kube-proxy "
    "drops it from the Service (no preStop delay), so requests are refused mid-rollout",
)
def test_a_rolling_update_under_load_fails_no_request(real_slot: Slot) -> None:
    name = app_name(real_slot)
    app = real_slot.write(WEB.replace("replicas = 1", "replicas = 2"), name=name, image=image("v1"))
    outcome, lines = real_slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    assert get_version_through_service(real_slot, name) == (200, "v1")
    service = real_slot.client.get(Service, f"{name}-web", namespace=real_slot.namespace)
    assert service.spec is not None and service.spec.ports
    url = f"http://{service.spec.clusterIP}:{service.spec.ports[0].port}/version"
    seen: dict[str, int] = {}
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:  # one client, back to back, until the rollout is over (bounded)
        for _ in range(20_000):
            if stop.is_set():
                return
            try:
                status, body = get(url)
                seen[f"{status} {body.strip()}"] = seen.get(f"{status} {body.strip()}", 0) + 1
            except OSError as error:
                failures.append(repr(error))

    loader = threading.Thread(target=load)
    loader.start()
    try:
        outcome, lines = real_slot.deploy(app, image=image("v2"))
    finally:
        stop.set()
        loader.join(timeout=30)
    assert isinstance(outcome, Rolled), lines.text
    assert failures == [], (len(failures), failures[:3], seen)
    assert seen.get("200 v1") and seen.get("200 v2"), seen  # the loop spanned the switch
    assert get_version_through_service(real_slot, name) == (200, "v2")
