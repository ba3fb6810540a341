"""pytest plugin: the real Docker hosts of ``scripts/docker-testenv``.

Load it with ``pytest_plugins = ["tests.testenv.docker"]``. The session fixture ``docker_env``
reads the ``SHIPWAY_TEST_*`` variables that ``scripts/docker-testenv env`` prints (``scripts/test``
exports them); when they are absent, or host A's engine does not answer, it runs
``scripts/docker-testenv up`` once (root only) and uses what ``env`` prints.

Every test that uses ``docker_env`` (directly or through another fixture) gets the ``docker``
marker, so ``pytest -m "not docker"`` leaves them out.

SSH and docker-py: with ``use_ssh_client=False`` docker-py connects with paramiko and reads
only ``~/.ssh/config`` (HostName, Port, User, IdentityFile, ProxyCommand) and
``~/.ssh/known_hosts`` (``SSHClient.load_system_host_keys``), both through
``os.path.expanduser``, i.e. ``$HOME``; unknown hosts are refused (``RejectPolicy``). The
environment ships a HOME for that (``SHIPWAY_TEST_SSH_HOME``) holding a config entry for host B
with the test key and a known_hosts with B's key; :func:`ssh_home` points ``$HOME`` there
while a client connects, so the user's own ``~/.ssh`` is never read nor written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from docker.models.containers import Container

from shipway.backends.docker.retrying import LOCAL_OR_SSH

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "docker-testenv"
MARKER = "docker"
# Label put on containers the fixtures start, so a test run's leftovers are easy to find.
TEST_LABEL = "org.shipway.test"

_ENV_VARS = (
    "SHIPWAY_TEST_DOCKER_A",
    "SHIPWAY_TEST_DOCKER_A_ADDRESS",
    "SHIPWAY_TEST_DOCKER_B",
    "SHIPWAY_TEST_DOCKER_B_SOCKET",
    "SHIPWAY_TEST_DOCKER_B_ADDRESS",
    "SHIPWAY_TEST_SSH_KEY",
    "SHIPWAY_TEST_KNOWN_HOSTS",
    "SHIPWAY_TEST_SSH_HOME",
    "SHIPWAY_TEST_REGISTRY",
    "SHIPWAY_TEST_IMAGE_PREFIX",
)


@dataclass(frozen=True)
class DockerHost:
    """One engine of the test environment."""

    name: str
    #: the engine URL a backend is configured with: ``unix://...`` (A), or for B
    #: ``ssh://root@B/run/…/docker.sock`` (:meth:`forwarded`; :meth:`dialed` without the path)
    url: str
    #: where ports it publishes are reachable from this (the root) network namespace
    address: str
    #: a local ``unix://`` socket of the same engine, for fixtures only (bypasses SSH)
    socket: str

    @property
    def over_ssh(self) -> bool:
        return self.url.startswith("ssh://")

    def forwarded(self) -> DockerHost:
        """Host B by the URL that names its engine's socket (``ssh://root@B/run/…/docker.sock``):
        each API connection a channel sshd forwards to it, not a ``dial-stdio`` session.
        The tests' host B is this one (:meth:`DockerEnv.from_environ`)."""
        assert self.over_ssh and self.socket.startswith("unix://")
        return dataclasses.replace(self, url=self.dialed().url + self.socket.removeprefix("unix://"))

    def dialed(self) -> DockerHost:
        """Host B by the URL without a path (``ssh://root@B``): each API connection a
        ``docker system dial-stdio`` session on the host, as ``docker -H ssh://`` does."""
        assert self.over_ssh
        parts = urllib.parse.urlsplit(self.url)
        return dataclasses.replace(self, url=f"{parts.scheme}://{parts.netloc}")


@dataclass(frozen=True)
class TestImages:
    """Refs (all in the test registry) of the images ``docker-testenv up`` built and pushed.

    ``web:*`` serve HTTP on ``$PORT`` (8080) with ``/up`` (health), ``/`` and ``/version``
    (the version string), ``/cgi-bin/env`` (the environment). Knobs: ``UP_STATUS``,
    ``CRASH_ON_START``, ``STARTUP_DELAY``, ``DRAIN_SECONDS`` (see images.py).
    """

    __test__ = False  # not a test class, despite the name

    base: str  #: the imported root filesystem (busybox + app); CMD /app/serve
    v1: str  #: web:v1, version "v1"
    v2: str  #: web:v2, version "v2"
    unhealthy: str  #: /up answers 500, / answers 200
    crash: str  #: exits 3 at once
    herokuish: str  #: herokuish layout: /start web, /app/Procfile, USER=herokuishuser, port 5000
    cnb: str  #: Cloud Native Buildpacks labels, entrypoint /cnb/process/web
    proxy: str  #: the Docker backend's proxy: Caddy built from source, FROM scratch
    python: str  #: Debian bookworm minbase + python3 + python3-venv (debootstrap), CMD python3

    @classmethod
    def under(cls, prefix: str, proxy: str | None = None) -> TestImages:
        return cls(
            base=f"{prefix}/base:latest",
            v1=f"{prefix}/web:v1",
            v2=f"{prefix}/web:v2",
            unhealthy=f"{prefix}/web:unhealthy",
            crash=f"{prefix}/web:crash",
            herokuish=f"{prefix}/herokuish:v1",
            cnb=f"{prefix}/cnb:v1",
            proxy=proxy or f"{prefix}/proxy:caddy",
            python=f"{prefix}/python-base:bookworm",
        )


def sdk_client(**kwargs: Any) -> docker.DockerClient:
    """A Docker SDK client that, as shipway's own (``RetryingAPIClient``, by the same rule),
    does not read the environment's proxies and ~/.netrc on every call when it reaches a
    Unix socket or SSH (neither applies there)."""
    client = docker.DockerClient(**kwargs)
    if client.api.base_url.startswith(LOCAL_OR_SSH):
        client.api.trust_env = False
    return client


@dataclass(frozen=True)
class DockerEnv:
    a: DockerHost
    b: DockerHost
    #: private key accepted by host B's sshd for root
    ssh_key: Path
    #: known_hosts holding host B's key (and nothing else)
    known_hosts: Path
    #: a HOME whose .ssh/config and .ssh/known_hosts make docker-py reach B (see ssh_home)
    ssh_home: Path
    #: host:port of the registry, the same for both hosts (insecure, plain HTTP)
    registry: str
    #: ``registry/namespace`` of the test images
    image_prefix: str
    images: TestImages

    @property
    def hosts(self) -> tuple[DockerHost, DockerHost]:
        return (self.a, self.b)

    @classmethod
    def from_environ(cls, env: os._Environ[str] | dict[str, str]) -> DockerEnv:
        prefix = env["SHIPWAY_TEST_IMAGE_PREFIX"]
        return cls(
            a=DockerHost(
                name="a",
                url=env["SHIPWAY_TEST_DOCKER_A"],
                address=env.get("SHIPWAY_TEST_DOCKER_A_ADDRESS", "127.0.0.1"),
                socket=env["SHIPWAY_TEST_DOCKER_A"],
            ),
            # B by its socket's path: a dial-stdio session per API connection (a docker CLI
            # process on the host) cost the run's sshd on B 163 CPU-seconds of 2,024. The
            # tests of dial-stdio itself ask for it (DockerHost.dialed)
            b=DockerHost(
                name="b",
                url=env["SHIPWAY_TEST_DOCKER_B"],
                address=env["SHIPWAY_TEST_DOCKER_B_ADDRESS"],
                socket=env["SHIPWAY_TEST_DOCKER_B_SOCKET"],
            ).forwarded(),
            ssh_key=Path(env["SHIPWAY_TEST_SSH_KEY"]),
            known_hosts=Path(env["SHIPWAY_TEST_KNOWN_HOSTS"]),
            ssh_home=Path(env["SHIPWAY_TEST_SSH_HOME"]),
            registry=env["SHIPWAY_TEST_REGISTRY"],
            image_prefix=prefix,
            images=TestImages.under(prefix, env.get("SHIPWAY_TEST_PROXY_IMAGE")),
        )

    def client(self, host: DockerHost, *, timeout: int = 60) -> docker.DockerClient:
        """A Docker SDK client for ``host``: B over SSH (paramiko, by ``dial-stdio``)."""
        if not host.over_ssh:
            return sdk_client(base_url=host.url, timeout=timeout)
        with ssh_home(self.ssh_home):  # the SDK's SSH transport runs dial-stdio, path or none
            url = host.dialed().url
            return sdk_client(base_url=url, timeout=timeout, use_ssh_client=False)

    def local_client(self, host: DockerHost, *, timeout: int = 60) -> docker.DockerClient:
        """A client on the host's local socket (set-up and clean-up; no SSH)."""
        return sdk_client(base_url=host.socket, timeout=timeout)

    def untag(self, name: str) -> int:
        """Remove, on both hosts, the references to the test repositories ``name`` and
        ``name-…``: a test app's builds and pushes, by tag, and its pulls by digest (which
        leave no tag). An image goes with its last reference, and its build's intermediate
        images with it. References, not ids: two apps' builds of the same inputs are one
        image, and the other app's reference keeps it. Left behind, they made each run's
        image lists longer than the last's, and every deploy's prune reads the whole list.
        Returns how many references went."""
        gone = 0
        mine = f"{self.image_prefix}/{name}"
        for host in self.hosts:
            client = self.local_client(host)
            try:
                for image in client.api.images(filters={"reference": f"{mine}*"}):
                    for ref in (image.get("RepoTags") or []) + (image.get("RepoDigests") or []):
                        repository = ref.split("@", 1)[0] if "@" in ref else ref.rsplit(":", 1)[0]
                        if repository != mine and not repository.startswith(f"{mine}-"):
                            continue
                        with contextlib.suppress(docker.errors.APIError):
                            client.api.remove_image(ref)
                            gone += 1
            finally:
                client.close()
        return gone

    def make_ssh_home(self, path: Path, known_hosts: str) -> Path:
        """A HOME under ``path`` with the test key in .ssh/config and ``known_hosts`` as its
        .ssh/known_hosts (e.g. ``""`` for a host never seen before)."""
        ssh = path / ".ssh"
        ssh.mkdir(parents=True, exist_ok=True, mode=0o700)
        (ssh / "config").write_text(
            f"Host {self.b.address}\n  User root\n  IdentityFile {self.ssh_key}\n"
            "  IdentitiesOnly yes\n"
        )
        (ssh / "known_hosts").write_text(known_hosts)
        return path


_home_lock = threading.Lock()


@contextlib.contextmanager
def ssh_home(home: Path) -> Iterator[None]:
    """Point ``$HOME`` at ``home`` for the duration (docker-py's paramiko transport reads
    ``~/.ssh/config`` and ``~/.ssh/known_hosts`` when the client is made and connects)."""
    with _home_lock:
        old = os.environ.get("HOME")
        os.environ["HOME"] = str(home)
        try:
            yield
        finally:
            if old is None:
                del os.environ["HOME"]
            else:
                os.environ["HOME"] = old


def _ping(url: str) -> bool:
    try:
        return bool(docker.DockerClient(base_url=url, timeout=5).ping())
    except Exception:
        return False


def _parse_exports(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in text.splitlines():
        parts = shlex.split(line)
        if len(parts) == 2 and parts[0] == "export" and "=" in parts[1]:
            key, _, value = parts[1].partition("=")
            env[key] = value
    return env


def ensure_docker_env() -> DockerEnv:
    """The environment from ``SHIPWAY_TEST_*``; runs ``docker-testenv up`` when a variable
    is missing or an engine does not answer on its local socket."""
    have = all(v in os.environ for v in _ENV_VARS)
    if (
        have
        and _ping(os.environ["SHIPWAY_TEST_DOCKER_A"])
        and _ping(os.environ["SHIPWAY_TEST_DOCKER_B_SOCKET"])
    ):
        return DockerEnv.from_environ(os.environ)
    if os.geteuid() != 0:
        pytest.fail(
            f"the Docker test hosts are not up and only root can start them: "
            f'run `sudo {SCRIPT} up` and `eval "$({SCRIPT} env)"`'
        )
    proc = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"{SCRIPT} up failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out = subprocess.run([str(SCRIPT), "env"], check=True, capture_output=True, text=True).stdout
    exports = _parse_exports(out)
    os.environ.update(exports)  # so processes the tests start (the CLI) see them too
    return DockerEnv.from_environ(exports)


# ---------------------------------------------------------------------------- HTTP helpers


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """(status, body) of a GET; HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode(errors="replace")


def wait_http(
    url: str,
    *,
    status: int = 200,
    timeout: float = 30.0,
    interval: float = 0.1,
    check: Callable[[str], bool] | None = None,
) -> str:
    """Poll ``url`` until it answers ``status`` (and ``check(body)``); return the body.
    Fails the test with the last answer or error after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: str = "no attempt"
    while True:
        try:
            got, body = http_get(url)
            if got == status and (check is None or check(body)):
                return body
            last = f"HTTP {got}: {body[:200]!r}"
        except OSError as e:  # refused, reset, timed out: not up yet
            last = repr(e)
        if time.monotonic() >= deadline:
            pytest.fail(f"GET {url} did not answer {status} within {timeout}s; last: {last}")
        time.sleep(interval)


def published_port(container: Container, container_port: str = "8080/tcp") -> int:
    """The host port Docker published ``container_port`` on (after a reload)."""
    container.reload()
    ports: dict[str, Any] = container.attrs["NetworkSettings"]["Ports"] or {}
    bindings = ports.get(container_port)
    if not bindings:
        raise AssertionError(f"{container.name}: {container_port} is not published: {ports}")
    return int(bindings[0]["HostPort"])


# ---------------------------------------------------------------------------- pytest hooks


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: needs the real Docker hosts of scripts/docker-testenv"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "docker_env" in getattr(item, "fixturenames", ()):
            item.add_marker(MARKER)


#: a container (created, never started) from each shared test image on each host: the images
#: many tests run at once are then "used by a container shipway did not make", which no
#: test's image pruning or destroy removes (docs/docker.md, *Old images*)
PIN = "shipway-test-pin-"


def pin_shared_images(env: DockerEnv) -> None:
    images = env.images
    shared = [images.v1, images.v2, images.unhealthy, images.crash, images.herokuish,
              images.cnb, images.proxy, images.python, images.base]  # fmt: skip
    for host in env.hosts:
        client = env.local_client(host)
        try:
            for ref in shared:
                name = PIN + ref.rsplit("/", 1)[-1].replace(":", "-")
                with contextlib.suppress(docker.errors.NotFound):
                    client.api.inspect_container(name)
                    continue  # made by another worker, or an earlier run: no pull
                with contextlib.suppress(docker.errors.APIError):  # made by another worker
                    client.images.pull(ref)
                    client.containers.create(ref, name=name, command=["true"])
        finally:
            client.close()


@pytest.fixture(scope="session")
def docker_env() -> DockerEnv:
    env = ensure_docker_env()
    pin_shared_images(env)
    return env


@pytest.fixture(scope="session")
def docker_a(docker_env: DockerEnv) -> Iterator[docker.DockerClient]:
    client = docker_env.client(docker_env.a)
    yield client
    client.close()


@pytest.fixture(scope="session")
def docker_b(docker_env: DockerEnv) -> Iterator[docker.DockerClient]:
    """Host B's engine over SSH (paramiko), as a backend would reach it."""
    client = docker_env.client(docker_env.b)
    yield client
    client.close()


@pytest.fixture
def docker_reap(docker_env: DockerEnv) -> Iterator[list[Container]]:
    """Append containers to the list; they are force-removed after the test."""
    containers: list[Container] = []
    yield containers
    for c in containers:
        with contextlib.suppress(docker.errors.NotFound):
            c.remove(force=True, v=True)
