"""Real containers on the test plane's real node (kubelet + containerd + kube-proxy).

kwok plays every other pod from stages; these tests are about what only a running container
gives: HTTP answered through a Service, a command's own output and exit code, the
container's log lines, and each doomed rollout failing fast with the kubelet's own reason
and rolling back (a crash loop with the process's real exit, an image tag the registry never
had, an OOM kill, a readiness probe that never passes), and the release command's Job with
its real output and exit code. Images are the Docker testenv's (``web:*`` in the test
registry, pulled by the node's containerd). Traffic through rollouts: test_real_traffic.py.
"""

from __future__ import annotations

import ipaddress
import os
import time
import urllib.request
import uuid

import pytest
from lightkube.resources.core_v1 import Pod, Service

from shipway.backends.protocol import Reason
from shipway.engine.outcome import Rolled, RolledBack
from shipway.spec import App

from .conftest import Lines, Slot

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


def said(outcome: RolledBack, lines: Lines) -> str:
    """Everything a failed deploy told its user: the failure and the lines it printed."""
    failure = outcome.failure
    return "\n".join([failure.message, *failure.details, lines.text])


def deployed_v1(slot: Slot, text: str = WEB) -> App:
    app = slot.write(text, name=app_name(slot), image=image("v1"))
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    return app


def still_v1(slot: Slot, app: App) -> None:
    """Rolled back: the Deployment runs v1 again and v1 answers through the Service."""
    running = slot.images()
    assert list(running) == [f"{app.name}-web"], running
    assert running[f"{app.name}-web"].split("@")[0] == image("v1"), running  # pinned or not
    assert get_version_through_service(slot, app.name) == (200, "v1")


def test_an_image_that_cannot_be_pulled_fails_at_once_with_the_registrys_answer(
    real_slot: Slot,
) -> None:
    app = deployed_v1(real_slot)
    missing = image(f"missing-{uuid.uuid4().hex[:8]}")  # a tag the test registry never had
    started = time.monotonic()
    outcome, lines = real_slot.deploy(app, image=missing)
    took = time.monotonic() - started
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason in ("ErrImagePull", "ImagePullBackOff"), outcome.failure
    assert "not found" in outcome.failure.message, outcome.failure  # containerd's words
    # the kubelet's event ("Failed to pull image …") or, when the pod's status is read
    # before the event is, the container's own waiting message: the same pull error
    assert "failed to pull" in said(outcome, lines).lower(), said(outcome, lines)
    assert took < 60, took  # at the first pull error, not at the deploy's timeout
    still_v1(real_slot, app)


OOM = """\
replicas = 1
command = ["sh", "-c", "echo taking 96 MiB; exec dd if=/dev/zero of=/dev/null bs=96M count=1"]
resources = { limits = { memory = "32Mi" } }
"""


def test_an_oom_kill_fails_fast_with_the_real_reason(real_slot: Slot) -> None:
    app = deployed_v1(real_slot)
    app = real_slot.edit("replicas = 1\n", OOM)  # a process that outgrows its memory limit
    outcome, lines = real_slot.deploy(app)
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason == "OOMKilled", outcome.failure
    assert outcome.failure.exit_code == 137, outcome.failure  # SIGKILL, from the kernel
    assert "taking 96 MiB" in said(outcome, lines)  # the container's own log
    still_v1(real_slot, app)


def test_a_readiness_probe_that_never_passes_fails_after_its_budget(real_slot: Slot) -> None:
    app = deployed_v1(real_slot)
    started = time.monotonic()
    outcome, lines = real_slot.deploy(app, image=image("unhealthy"))  # /up answers 500
    took = time.monotonic() - started
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.failure.reason == "NotReady", outcome.failure
    # the kubelet's own probe event, with the status the app answered
    assert "Readiness probe failed: HTTP probe failed with statuscode: 500" in said(outcome, lines)
    # the probe's budget (3 attempts, 1 s apart, 1 s timeout) + 10 s: not the deploy's timeout
    assert took < 60, took
    still_v1(real_slot, app)


RELEASE = 'image_type = "dockerfile"\nrelease_command = ["sh", "-c", "{script}"]'
MIGRATE = "echo migrating the schema for $APP_VERSION; echo 2 tables made >&2"
BROKEN = "echo migrating for $APP_VERSION; echo migration 7 failed: no such table >&2; exit 4"


def test_the_log_of_a_container_that_just_ended_is_read_once_it_has_settled(
    real_slot: Slot,
) -> None:
    """The runtime may tell a container's exit before its last lines reach the log (stdout
    and stderr are copied apart), so a failure reads the log again until it stops changing.
    Here a container still writing a line every 0.15 s stands for that late copy: the read
    begins at its first line and must end with its last."""
    app = real_slot.write(WEB, name=app_name(real_slot), image=image("v1"))
    backend = real_slot.backend(app)
    name = f"writer-{uuid.uuid4().hex[:6]}"
    script = "for i in 1 2 3 4 5 6 7 8 9 10; do echo line $i; sleep 0.15; done; exec sleep 600"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": real_slot.namespace},
        "spec": {
            "containers": [{"name": "w", "image": image("v1"), "command": ["sh", "-c", script]}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    real_slot.client.create(Pod.from_dict(pod))
    deadline = time.monotonic() + 120
    while "log: line 1" not in backend._log_tail(name, "w"):
        assert time.monotonic() < deadline, backend._log_tail(name, "w")
        time.sleep(0.05)  # the pace of asking for its log until its first line is there
    assert backend._log_tail(name, "w", ended=True)[-1] == "log: line 10"


def test_the_release_job_runs_and_a_failing_one_stops_the_release(real_slot: Slot) -> None:
    text = WEB.replace('image_type = "dockerfile"', RELEASE.format(script=MIGRATE))
    app = real_slot.write(text, name=app_name(real_slot), image=image("v1"))
    outcome, lines = real_slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    # its output, stdout and stderr, as the Docker and local backends show it
    assert "release command: migrating the schema for v1" in lines.text
    assert "release command: 2 tables made" in lines.text

    app = real_slot.edit(MIGRATE, BROKEN)
    outcome, lines = real_slot.deploy(app, image=image("v2"))
    assert isinstance(outcome, RolledBack), lines.text
    failure = outcome.failure
    assert failure.reason == Reason.RELEASE_COMMAND_FAILED, failure
    assert failure.exit_code == 4, failure  # the command's own exit code
    assert "migration 7 failed: no such table" in "\n".join(failure.details), failure
    assert "migrating for v2" in "\n".join(failure.details)  # it ran in the new image
    # nothing new ran: no pod of v2 but the Job's, and v1 serves as before
    pods = real_slot.client.list(Pod, namespace=real_slot.namespace)
    v2 = [
        str(p.metadata.name if p.metadata else "")
        for p in pods
        if p.spec and p.spec.containers[0].image.startswith(image("v2"))
    ]
    assert v2 and all("-release-" in name for name in v2), v2
    still_v1(real_slot, app)
