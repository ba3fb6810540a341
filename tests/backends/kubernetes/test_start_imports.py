"""What a Kubernetes command loads that it does not use: neither the websocket client (only
an exec into a pod, a backup, needs it) nor the Docker SDK's SSH transport (the image is
looked up on the local engine's socket). Each is tens of milliseconds of every command's
start (``bench/cli_startup.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.backends.kubernetes.conftest import BASE_ENV, Slot

#: runs the command line in-process, then reports its exit code and the modules loaded
PROBE = """
import json, sys
from shipway.cli.main import main
sys.argv = ["shipway", *sys.argv[1:]]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"exit": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""

UNUSED = ("paramiko", "invoke", "docker.transport.sshconn", "httpx2.websockets", "wsproto")


def test_a_plan_loads_neither_the_websocket_client_nor_ssh(slot: Slot) -> None:
    slot.write()
    engine = os.environ.get("SHIPWAY_TEST_DOCKER_A", "")
    assert engine.startswith("unix://"), "eval scripts/docker-testenv env"
    p = subprocess.run(
        [sys.executable, "-c", PROBE, "-f", str(slot.spec_file), "plan", "test1"],
        env={**os.environ, **BASE_ENV, "KUBECONFIG": str(slot.kubeconfig), "DOCKER_HOST": engine},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    report = json.loads(p.stderr.strip().splitlines()[-1])
    assert report["exit"] == 0, p.stdout + p.stderr
    assert "shipway.backends.kubernetes.backend" in report["modules"]
    assert "docker" in report["modules"]  # the image was looked up on the engine
    loaded = [m for m in report["modules"] if m.startswith(UNUSED)]
    assert loaded == []
