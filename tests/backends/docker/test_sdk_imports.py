"""The Docker SDK without its SSH transport (shipway.backends.dockersdk): a host on a local
socket never loads paramiko (nor invoke, through ``paramiko.config``); an ssh:// host still
works, through shipway's own connection and through the SDK's own adapter alike, each
loading paramiko when it is first used.

Each case runs in a fresh interpreter: in this one, ``docker`` was imported before shipway
(the conftest does), so the SDK here has its SSH transport as usual.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import docker.errors
import paramiko
import pytest

from shipway.backends.docker.edge import edge
from shipway.errors import BackendError
from tests.backends.docker.conftest import SLOT, Deployment
from tests.cli.probe import run_loaded
from tests.testenv.docker import DockerEnv

#: the modules only an ssh:// host needs
SSH_ONLY = ("paramiko", "invoke", "docker.transport.sshconn")

PRELUDE = """
import json, sys
import shipway.backends.docker  # first, as a command imports it
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.machines import addresses
from shipway.spec.model import DockerHost

def ssh_only():
    return sorted(m for m in sys.modules if m.split(".")[0] in ("paramiko", "invoke")
                  or m == "docker.transport.sshconn")

def shipway_ping(url):
    conn = HostConnection(addresses([DockerHost(url=url)])[0])
    try:
        return conn.client().ping()
    finally:
        conn.close()
"""


def probe(code: str, env: dict[str, str], *args: str) -> dict[str, object]:
    p = subprocess.run(
        [sys.executable, "-c", PRELUDE + code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    out: dict[str, object] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def test_a_local_socket_host_loads_no_ssh_transport(
    docker_env: DockerEnv, ssh_env: dict[str, str]
) -> None:
    code = """
out = {"before": ssh_only(), "ping": shipway_ping(sys.argv[1]), "after": ssh_only()}
print(json.dumps(out))
"""
    out = probe(code, dict(os.environ), docker_env.a.url)
    assert out == {"before": [], "ping": True, "after": []}


def test_commands_on_a_local_socket_slot_load_no_ssh_transport(deployment: Deployment) -> None:
    """The whole command, as a user runs it: a deploy, then the plan and status of a docker
    slot whose host is a local socket."""
    deployment.write(hosts=[deployment.env.a])
    for args in (["deploy", SLOT], ["plan", SLOT], ["status", SLOT]):
        run = run_loaded(["-f", str(deployment.spec_file), *args], os.environ)
        assert run.exit == 0, (args, run.stdout, run.stderr)
        assert [m for m in run.modules if m.startswith(SSH_ONLY)] == [], args


def test_an_ssh_host_loads_it_when_first_used(
    docker_env: DockerEnv, ssh_env: dict[str, str]
) -> None:
    """shipway's own SSH connection (:mod:`.sshpool`), then the SDK's own SSH adapter (as
    code in the same process that gives the SDK an ssh:// URL gets it): both answer."""
    code = """
import docker
out = {"before": ssh_only(), "shipway": shipway_ping(sys.argv[1]), "after": ssh_only()}
sdk = docker.DockerClient(base_url=sys.argv[1], use_ssh_client=False, timeout=60)
out["sdk"] = sdk.ping()
out["adapter"] = type(sdk.api._custom_adapter).__module__
sdk.close()
env = docker.from_env(environment={"DOCKER_HOST": sys.argv[1]}, use_ssh_client=False)
out["from_env"] = env.ping()
env.close()
from docker.transport import SSHHTTPAdapter
out["name"] = SSHHTTPAdapter.__module__
print(json.dumps(out))
"""
    # the SDK's own adapter reads ~/.ssh (its config names the test key; its known_hosts B)
    env = {**os.environ, "HOME": str(docker_env.ssh_home)}
    out = probe(code, env, docker_env.b.dialed().url)  # the SDK runs dial-stdio only
    assert out["before"] == []
    assert out["shipway"] is True
    assert {"paramiko", "docker.transport.sshconn"} <= set(out["after"])  # type: ignore[arg-type]
    assert out["sdk"] is True and out["from_env"] is True
    assert out["adapter"] == out["name"] == "docker.transport.sshconn"


def test_edge_names_an_ssh_failure_and_an_os_error() -> None:
    cases: list[tuple[Exception, str]] = [
        (paramiko.SSHException("no route"), "SSH failed: no route"),
        (ConnectionRefusedError("Connection refused"), "Connection refused"),
        (docker.errors.NotFound("gone"), "not found: gone"),
    ]
    for raised, said in cases:
        with pytest.raises(BackendError) as caught, edge("read the records"):
            raise raised
        assert str(caught.value) == f"read the records: {said}"
    with pytest.raises(KeyError), edge("read the records"):  # not an engine's: as it is
        raise KeyError("x")
