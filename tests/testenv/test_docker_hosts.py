"""The Docker test environment itself: two real engines, one over SSH, a local registry and
images built without any pull. If these fail, the Docker-backend tests cannot mean anything."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import docker
import docker.errors
import paramiko
import pytest
from docker.models.containers import Container
from docker.transport.sshconn import SSHHTTPAdapter

from tests.testenv.docker import (
    TEST_LABEL,
    DockerEnv,
    DockerHost,
    http_get,
    published_port,
    wait_http,
)


def _name(prefix: str) -> str:
    return f"shipway-testenv-{prefix}-{uuid.uuid4().hex[:8]}"


def _registry_digest(env: DockerEnv, ref: str) -> str:
    """Manifest digest the registry serves for ``ref`` (registry/repo:tag)."""
    repo, _, tag = ref.removeprefix(env.registry + "/").rpartition(":")
    req = urllib.request.Request(
        f"http://{env.registry}/v2/{repo}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        digest = resp.headers["Docker-Content-Digest"]
    assert isinstance(digest, str) and digest.startswith("sha256:")
    return digest


def _run_web(
    client: docker.DockerClient,
    host: DockerHost,
    image: str,
    reap: list[Container],
    *,
    port: int = 8080,
    environment: dict[str, str] | None = None,
) -> tuple[Container, str]:
    """Run ``image`` publishing ``port`` on a free port of the host's address; return the
    container and its base URL as seen from this network namespace."""
    # (address, None): Docker picks a free port on that address
    ports: dict[str, Any] = {f"{port}/tcp": (host.address, None)}
    container = client.containers.run(
        image,
        detach=True,
        name=_name(host.name),
        environment={"PORT": str(port), **(environment or {})},
        ports=ports,
        labels={TEST_LABEL: "testenv"},
    )
    reap.append(container)
    return container, f"http://{host.address}:{published_port(container, f'{port}/tcp')}"


def test_both_engines_answer(
    docker_env: DockerEnv, docker_a: docker.DockerClient, docker_b: docker.DockerClient
) -> None:
    assert docker_a.ping() is True
    assert docker_b.ping() is True
    info_a, info_b = docker_a.info(), docker_b.info()
    assert info_a["ID"] != info_b["ID"], "A and B must be distinct engines"
    assert info_a["DockerRootDir"].endswith("/a/docker")
    assert info_b["DockerRootDir"].endswith("/b/docker")
    assert docker_env.registry in info_b["RegistryConfig"]["IndexConfigs"]
    # B is reached over SSH through paramiko (not the ssh binary), as the backend will.
    adapter = docker_b.api.get_adapter("http+docker://ssh")
    assert isinstance(adapter, SSHHTTPAdapter)
    assert isinstance(adapter.ssh_client, paramiko.SSHClient)
    transport = adapter.ssh_client.get_transport()
    assert transport is not None and transport.is_active()
    assert transport.getpeername()[0] == docker_env.b.address
    # and B's local socket reaches the same engine
    local_b = docker_env.local_client(docker_env.b)
    try:
        assert local_b.info()["ID"] == info_b["ID"]
    finally:
        local_b.close()


def test_each_engine_keeps_its_data_in_memory_and_collects_garbage_less_often(
    docker_a: docker.DockerClient, docker_b: docker.DockerClient
) -> None:
    """The machine's tuning ``docker-testenv up`` does (docs/testing.md, *Where the CPU
    went*): each engine's data root on a tmpfs, and its dockerd with the Go collector at 400,
    which the helpers it runs itself again for inherit."""
    for client in (docker_a, docker_b):
        root = Path(client.info()["DockerRootDir"])
        assert _file_system(root) == "tmpfs", root
        pids = [
            proc.name
            for proc in Path("/proc").iterdir()
            if proc.name.isdigit() and str(root.parent / "daemon.json") in _cmdline(proc)
        ]
        assert len(pids) == 1, (root, pids)
        environ = Path(f"/proc/{pids[0]}/environ").read_bytes().split(b"\0")
        assert b"GOGC=400" in environ


def _file_system(path: Path) -> str:
    """The type of the file system ``path`` is on, as the script reads it (findmnt)."""
    found = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "-T", str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return found.stdout.split("\n")[0].strip()


def _cmdline(proc: Path) -> str:
    with contextlib.suppress(OSError):
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


@pytest.mark.parametrize("host_name", ["a", "b"])
def test_image_serves_http_on_each_host(
    docker_env: DockerEnv,
    docker_a: docker.DockerClient,
    docker_b: docker.DockerClient,
    docker_reap: list[Container],
    host_name: str,
) -> None:
    host = docker_env.a if host_name == "a" else docker_env.b
    client = docker_a if host_name == "a" else docker_b
    client.images.pull(docker_env.images.v1)
    _, url = _run_web(client, host, docker_env.images.v1, docker_reap)
    assert wait_http(f"{url}/up", timeout=30) == "ok\n"
    assert http_get(f"{url}/version") == (200, "v1\n")


def test_host_b_pulls_from_the_local_registry(
    docker_env: DockerEnv,
    docker_b: docker.DockerClient,
    docker_reap: list[Container],
) -> None:
    # web:v2 under a tag of this test's own, pushed from A: B has never had it, and no other
    # test's container or image on B is touched (tests run at once on the same hosts)
    repo = docker_env.images.v2.rpartition(":")[0]
    ref = f"{repo}:pull-{uuid.uuid4().hex[:8]}"
    local_a = docker_env.local_client(docker_env.a)
    try:
        assert local_a.images.pull(docker_env.images.v2).tag(ref)
        pushed = local_a.images.push(ref)
        assert "errorDetail" not in pushed, pushed
        with pytest.raises(docker.errors.ImageNotFound):
            docker_b.images.get(ref)

        image = docker_b.images.pull(ref)

        digest = _registry_digest(docker_env, ref)
        assert digest == _registry_digest(docker_env, docker_env.images.v2)
        assert f"{repo}@{digest}" in image.attrs["RepoDigests"]
        assert image.labels["org.shipway.testenv.kind"] == "dockerfile"
        _, url = _run_web(docker_b, docker_env.b, ref, docker_reap)
        assert wait_http(f"{url}/up") == "ok\n"
        assert http_get(f"{url}/version") == (200, "v2\n")
    finally:
        for client in (local_a, docker_b):
            with contextlib.suppress(docker.errors.APIError):
                client.images.remove(ref, force=True)
        local_a.close()


def test_a_session_on_host_b_is_not_its_top_shell(docker_env: DockerEnv) -> None:
    # sshd runs a session's command in root's bash, which reads ~/.bashrc when it is the top
    # shell of an ssh session (on this kind of machine: pyenv's set-up, a dozen programs a
    # session). B's sshd sets SHLVL, so the session's bash is a nested one (its level is 2)
    ssh = paramiko.SSHClient()
    ssh.load_host_keys(str(docker_env.known_hosts))
    ssh.set_missing_host_key_policy(paramiko.RejectPolicy())
    ssh.connect(
        docker_env.b.address,
        username="root",
        key_filename=str(docker_env.ssh_key),
        look_for_keys=False,
        allow_agent=False,
        timeout=30,
    )
    try:
        _, out, _ = ssh.exec_command("echo $SHLVL", timeout=30)
        assert out.read().decode().strip() == "2"
    finally:
        ssh.close()


def test_unknown_ssh_host_key_is_refused(docker_env: DockerEnv, tmp_path: Path) -> None:
    # A known_hosts that lacks B's key (here: empty) must make the connection fail, and the
    # key must not be added anywhere (paramiko's RejectPolicy, docker-py's default).
    home = docker_env.make_ssh_home(tmp_path / "home", known_hosts="")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts") as exc:
        dataclasses.replace(docker_env, ssh_home=home).client(docker_env.b)
    assert type(exc.value) is paramiko.SSHException  # not BadHostKeyException
    assert (home / ".ssh" / "known_hosts").read_text() == ""


def test_wrong_ssh_host_key_is_refused(docker_env: DockerEnv, tmp_path: Path) -> None:
    other = paramiko.Ed25519Key.from_private_key_file(str(docker_env.ssh_key))  # not B's key
    line = f"{docker_env.b.address} {other.get_name()} {other.get_base64()}\n"
    home = docker_env.make_ssh_home(tmp_path / "home", known_hosts=line)
    with pytest.raises(paramiko.BadHostKeyException):
        dataclasses.replace(docker_env, ssh_home=home).client(docker_env.b)


def test_known_hosts_file_names_host_b(docker_env: DockerEnv) -> None:
    known = paramiko.HostKeys(str(docker_env.known_hosts))
    assert docker_env.b.address in known
    client = docker_env.client(docker_env.b)
    try:
        adapter = client.api.get_adapter("http+docker://ssh")
        assert isinstance(adapter, SSHHTTPAdapter)
        assert adapter.ssh_client is not None
        transport = adapter.ssh_client.get_transport()
        assert transport is not None
        served = transport.get_remote_server_key()
    finally:
        client.close()
    assert known.check(docker_env.b.address, served)


def test_unhealthy_and_crash_images(
    docker_env: DockerEnv, docker_a: docker.DockerClient, docker_reap: list[Container]
) -> None:
    _, url = _run_web(docker_a, docker_env.a, docker_env.images.unhealthy, docker_reap)
    wait_http(f"{url}/", timeout=30)
    assert http_get(f"{url}/up")[0] == 500

    crashed = docker_a.containers.run(
        docker_env.images.crash, detach=True, name=_name("a"), labels={TEST_LABEL: "testenv"}
    )
    docker_reap.append(crashed)
    assert crashed.wait(timeout=30)["StatusCode"] == 3
    assert b"CRASH_ON_START is set" in crashed.logs()


def test_herokuish_and_cnb_images(
    docker_env: DockerEnv, docker_a: docker.DockerClient, docker_reap: list[Container]
) -> None:
    heroku = docker_a.images.get(docker_env.images.herokuish)
    assert "USER=herokuishuser" in heroku.attrs["Config"]["Env"]
    assert heroku.attrs["Config"]["Cmd"] == ["/start", "web"]
    assert heroku.labels["org.shipway.testenv.kind"] == "herokuish"
    _, url = _run_web(docker_a, docker_env.a, docker_env.images.herokuish, docker_reap, port=5000)
    assert wait_http(f"{url}/version") == "herokuish-v1\n"

    cnb = docker_a.images.get(docker_env.images.cnb)
    assert cnb.attrs["Config"]["Entrypoint"] == ["/cnb/process/web"]
    build = json.loads(cnb.labels["io.buildpacks.build.metadata"])
    assert {p["type"] for p in build["processes"]} == {"web", "worker"}
    assert "buildpacks" in json.loads(cnb.labels["io.buildpacks.lifecycle.metadata"])
    assert cnb.labels["org.shipway.testenv.kind"] == "pack"
    _, url = _run_web(docker_a, docker_env.a, docker_env.images.cnb, docker_reap)
    assert wait_http(f"{url}/version") == "cnb-v1\n"


def test_untag_removes_a_test_apps_references_and_keeps_another_apps(
    docker_env: DockerEnv,
) -> None:
    """A test's clean-up removes its app's tags, and on host B the digest reference a pull
    by digest leaves (no tag); an image another app also names stays, by that app's tag,
    and so does a repository whose name only starts like the app's."""
    env = docker_env
    mine, other = f"t{uuid.uuid4().hex[:8]}", f"t{uuid.uuid4().hex[:8]}"
    tags = [f"{mine}:v1", f"{mine}-second:v1", f"{other}:v1", f"{mine}x:v1"]
    for host in env.hosts:
        client = env.local_client(host)
        try:
            image = client.images.get(env.images.v1)
            for tag in tags:
                repository, _, version = f"{env.image_prefix}/{tag}".rpartition(":")
                assert image.tag(repository, version)
        finally:
            client.close()
    pulled = f"{env.image_prefix}/{mine}-pulled"
    a, b = env.local_client(env.a), env.local_client(env.b)
    try:
        assert a.images.get(env.images.v1).tag(pulled, "v1")
        assert "errorDetail" not in a.images.push(pulled, "v1")
        by_digest = f"{pulled}@{_registry_digest(env, f'{pulled}:v1')}"
        b.images.pull(by_digest)
        assert by_digest in b.images.get(by_digest).attrs["RepoDigests"]

        assert env.untag(mine) >= 6  # four tags, the tag pushed from A, B's digest
        for client in (a, b):
            left = {
                ref.removeprefix(env.image_prefix + "/")
                for i in client.api.images(filters={"reference": f"{env.image_prefix}/t*"})
                for ref in (i.get("RepoTags") or []) + (i.get("RepoDigests") or [])
            }
            assert {f"{other}:v1", f"{mine}x:v1"} <= left, left
            assert not [r for r in left if r.startswith((f"{mine}:", f"{mine}-"))], left
            assert client.images.get(env.images.v1).id == image.id
        with pytest.raises(docker.errors.ImageNotFound):
            b.images.get(by_digest)
    finally:
        a.close()
        b.close()
        env.untag(other)
        env.untag(f"{mine}x")
