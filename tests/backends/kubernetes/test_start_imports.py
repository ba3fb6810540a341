"""What a Kubernetes command loads that it does not use: neither the websocket client (only
an exec into a pod, a backup, needs it) nor the Docker SDK's SSH transport (the image is
looked up on the local engine's socket). Each is tens of milliseconds of every command's
start (``bench/cli_startup.py``)."""

from __future__ import annotations

import os

from tests.backends.kubernetes.conftest import BASE_ENV, Slot
from tests.cli.probe import run_loaded

UNUSED = ("paramiko", "invoke", "docker.transport.sshconn", "httpx2.websockets", "wsproto")


def test_a_plan_loads_neither_the_websocket_client_nor_ssh(slot: Slot) -> None:
    slot.write()
    engine = os.environ.get("SHIPWAY_TEST_DOCKER_A", "")
    assert engine.startswith("unix://"), "eval scripts/docker-testenv env"
    env = {**os.environ, **BASE_ENV, "KUBECONFIG": str(slot.kubeconfig), "DOCKER_HOST": engine}
    run = run_loaded(["-f", str(slot.spec_file), "plan", "test1"], env)
    assert run.exit == 0, run.stdout + run.stderr
    assert "shipway.backends.kubernetes.backend" in run.modules
    assert "docker" in run.modules  # the image was looked up on the engine
    assert [m for m in run.modules if m.startswith(UNUSED)] == []
