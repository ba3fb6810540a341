"""``shipway run`` on a Docker host: SIGTERM removes the one-off container and exits 143
(no traceback); a one-off whose shipway was killed is removed by the next run from this
machine (its owner label proves it orphaned); ``-e KEY=VALUE`` reaches the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from shipway.engine import Rolled
from tests import cliproc
from tests.backends.docker.conftest import SLOT, Deployment, ssh_environ
from tests.backends.local.conftest import eventually


def spawn(d: Deployment, *args: str) -> subprocess.Popen[str]:
    return cliproc.ShipwayProcess(
        [sys.executable, "-m", "shipway", "-f", str(d.spec_file), *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **ssh_environ(d.env)},
    )  # fmt: skip


def test_sigterm_removes_the_one_off_and_exits_143(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    p = spawn(deployment, "run", SLOT, "--", "sleep", "600")
    try:
        eventually(
            lambda: [c for c in deployment.containers(env.a, kind="one-off")
                     if c.status == "running"],
            what="the one-off container running",
        )  # fmt: skip
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143, err
    assert "Traceback" not in err, err
    assert "stopped by SIGTERM" in err
    assert deployment.containers(env.a, kind="one-off") == []


def test_a_killed_runs_one_off_is_removed_by_the_next_run_and_env_reaches_it(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    p = spawn(deployment, "run", SLOT, "--", "sleep", "600")
    try:
        [left] = eventually(
            lambda: [c for c in deployment.containers(env.a, kind="one-off")
                     if c.status == "running"],
            what="the one-off container running",
        )  # fmt: skip
    finally:
        p.kill()  # SIGKILL: its finally never runs, the container stays
        p.communicate(timeout=60)
    assert [c.name for c in deployment.containers(env.a, kind="one-off")] == [left.name]

    r = cliproc.run(
        [sys.executable, "-m", "shipway", "-f", str(deployment.spec_file), "run", SLOT,
         "-e", "DJANGO_SUPERUSER_USERNAME=ann", "-e", "FROM_SHELL", "--",
         "sh", "-c", "echo $DJANGO_SUPERUSER_USERNAME $FROM_SHELL"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
        env={**os.environ, **ssh_environ(env), "FROM_SHELL": "shell-value"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ann shell-value\n"
    assert f"removed one-off container {left.name} on" in r.stderr, r.stderr
    assert deployment.containers(env.a, kind="one-off") == []
