"""Fixtures for the Docker backend's tests on the real hosts of ``scripts/docker-testenv``.

``deployment`` makes a fresh app (its own name, so tests never see each other's objects)
with a spec on disk, and removes everything labelled with that app from both hosts after
the test. The SSH settings point at the test environment's key and known_hosts through the
environment (``SHIPWAY_SSH_CONFIG``, ``SHIPWAY_KNOWN_HOSTS``), never the user's ``~/.ssh``.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from shipway import api
from shipway.backends.docker import DockerBackend, connect
from shipway.engine import Outcome
from shipway.guard import Clearance, Guard
from shipway.release.model import Release, ReleaseStatus
from shipway.spec import App, load
from shipway.spec.model import Target
from tests.testenv import ports
from tests.testenv.docker import DockerEnv, DockerHost, http_get, sdk_client

SLOT = "test"

#: the test image's web process, as a spec declares it (its health check ends the text, so
#: a test may add a field of the check after it)
WEB = """
[processes.web]
port = 8080
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 80
"""


class Lines:
    """A reporter that keeps every line (and can act when one appears)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.hooks: list[tuple[str, Callable[[], None]]] = []

    def line(self, text: str) -> None:
        self.lines.append(text)
        for needle, hook in list(self.hooks):
            if needle in text:
                self.hooks.remove((needle, hook))
                hook()

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None:
        self.lines.append(f"{process} {dict(counts)} {note}")

    def on(self, needle: str, hook: Callable[[], None]) -> None:
        """Run ``hook`` (once) when a line containing ``needle`` is reported."""
        self.hooks.append((needle, hook))

    def text(self) -> str:
        return "\n".join(self.lines)


def listed(client: docker.DockerClient, **filters: Any) -> list[Any]:
    """The containers a list call names, each inspected, leaving out those removed in
    between (the SDK's ``containers.list`` raises NotFound for them, and the suite's other
    tests and the deploy under test remove containers at any moment)."""
    found = []
    for row in client.api.containers(all=True, filters=filters):
        try:
            found.append(client.containers.get(row["Id"]))
        except docker.errors.NotFound:
            continue
    return found


def removed(client: docker.DockerClient, container: str, within: float = 30.0) -> None:
    """Remove the container with this name or id, again while the engine leaves it half
    removed (a removal fails when another call reads its files at that moment, and the
    container then stays listed as "removing": every read of its files answers 500, and a
    test's proxy left so would fail the other tests' look-ups on the host)."""
    deadline = time.monotonic() + within
    while True:
        try:
            client.api.remove_container(container, force=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)  # the pace of trying again while the other call holds its files


@contextlib.contextmanager
def left_half_removed(container: Any) -> Iterator[None]:
    """The container as the engine leaves it when its removal fails midway (the way
    another call reading its files at that moment makes it fail): a file of its own layer
    made immutable, its removal asked for and refused. Made removable again at the end.
    For host A only, whose engine keeps its layers on this machine."""
    pin = Path(container.attrs["GraphDriver"]["Data"]["UpperDir"]) / "held-by-the-test"
    pin.write_text("held\n")
    subprocess.run(["chattr", "+i", str(pin)], check=True)
    try:
        with pytest.raises(docker.errors.APIError, match="failed to remove root filesystem"):
            container.remove(force=True)
        yield
    finally:
        subprocess.run(["chattr", "-i", str(pin)], check=True)


def names_in(container: Any, path: str) -> list[str]:
    """The names directly under ``path`` in a container, read from its archive (an
    ``exec`` of ``ls`` returned no output once on a loaded machine)."""
    stream, _ = container.client.api.get_archive(container.id, path)
    top = path.rstrip("/").rsplit("/", 1)[-1]
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        parts = [member.name.split("/") for member in tar.getmembers()]
    return sorted({p[1] for p in parts if len(p) > 1 and p[0] == top})


def servers_started(proxy: Any) -> int:
    """How many times the proxy's Caddy started a server (once per server at its start and
    at each config load): unchanged across a change that loads no config."""
    return int(proxy.logs(stdout=True, stderr=True).count(b'"server running"'))


def free_port() -> int:
    """A proxy port of this test's own (tests.testenv.ports: a band per xdist worker) that
    no shared proxy on the test hosts serves: one another test or run left on host B (its
    own network namespace) is not seen by a bind here, and would already hold the port's
    routes (seen once: two apps' slots on one proxy, the second refused)."""
    engines = [url for name in ("SHIPWAY_TEST_DOCKER_A", "SHIPWAY_TEST_DOCKER_B_SOCKET")
               if (url := os.environ.get(name, "")).startswith("unix://")]  # fmt: skip
    for _ in range(100):
        port = ports.free_port("0.0.0.0")
        if not any(_proxy_on(engine, port) for engine in engines):
            return port
    raise RuntimeError("no port of this worker's band is free of shared proxies")


def _proxy_on(engine: str, port: int) -> bool:
    client = sdk_client(base_url=engine, timeout=30)
    try:
        found = client.api.containers(all=True, filters={"name": f"shipway-proxy-{port}"})
        return any(f"/shipway-proxy-{port}" in (c.get("Names") or []) for c in found)
    finally:
        client.close()


def ssh_environ(env: DockerEnv) -> dict[str, str]:
    return {
        "SHIPWAY_SSH_CONFIG": str(env.ssh_home / ".ssh" / "config"),
        "SHIPWAY_KNOWN_HOSTS": str(env.known_hosts),
    }


@dataclass
class Deployment:
    """One test app in slot ``test`` on the test hosts."""

    env: DockerEnv
    name: str
    dir: Path
    port: int
    hosts: list[DockerHost] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)
    #: the proxy ports of the app's other slots (:meth:`another_port`), cleaned up too
    more_ports: list[int] = field(default_factory=list)

    def another_port(self) -> int:
        """A proxy port of this test's own for another slot of the app: the shared proxy
        there goes with the test's, as its own port's does (one left behind stayed on the
        host for good, and every later look-up of who serves a name read it)."""
        port = free_port()
        self.more_ports.append(port)
        return port

    @property
    def spec_file(self) -> Path:
        return self.dir / "shipway.toml"

    def write(
        self,
        *,
        image: str | None = None,
        processes: str | None = None,
        hosts: list[DockerHost | tuple[DockerHost, list[str]]] | None = None,
        extra: str = "",
        slot_extra: str = "",
        drain: str = "1s",
    ) -> App:
        image = image or self.env.images.v1
        entries = []
        self.hosts = []
        for item in hosts or [self.env.a, self.env.b]:
            host, roles = item if isinstance(item, tuple) else (item, None)
            self.hosts.append(host)
            if roles is None:
                entries.append(f'"{host.url}"')
            else:
                entries.append(f'{{ url = "{host.url}", processes = {roles!r} }}'.replace("'", '"'))
        self.spec_file.write_text(
            f"""
[app]
name = "{self.name}"
image = "{image}"
{processes if processes is not None else WEB}
{extra}
[slots.{SLOT}]
backend = "docker"
hosts = [{", ".join(entries)}]
proxy_image = "{self.env.images.proxy}"
proxy_port = {self.port}
drain_timeout = "{drain}"
{slot_extra}
"""
        )
        return self.app()

    def app(self) -> App:
        return load(self.spec_file)

    def backend(self) -> DockerBackend:
        app = self.app()
        return connect(app, app.slots.get(SLOT))

    def on_hosts(
        self, hosts: list[DockerHost | tuple[DockerHost, list[str]]]
    ) -> tuple[App, DockerBackend, Target, Clearance]:
        """The slot written on ``hosts``: its app, a backend of it, its target and clearance."""
        app = self.write(hosts=hosts)
        return app, self.backend(), app.slots.target(SLOT), Guard(app.slots).clear(SLOT)

    def pending(self, app: App, revision: int) -> Release:
        """A pending release of the slot with nothing in it but its image's name."""
        return Release(
            app=app.name,
            slot=SLOT,
            revision=revision,
            status=ReleaseStatus.PENDING,
            image=f"x:{revision}",
        )

    def url(self, host: DockerHost, path: str = "/version") -> str:
        return f"http://{host.address}:{self.port}{path}"

    def get(self, host: DockerHost, path: str = "/version") -> tuple[int, str]:
        return http_get(self.url(host, path))

    def deploy(self, lines: Lines | None = None, **kw: Any) -> Outcome:
        return api.deploy(self.app(), SLOT, reporter=lines or Lines(), timeout=120, **kw)

    def local(self, host: DockerHost) -> docker.DockerClient:
        return self.env.local_client(host)

    def containers(self, host: DockerHost, **labels: str) -> list[Any]:
        """The app's containers on ``host`` with these labels (and, for every kind or
        ``kind="proxy"``, the host's shared proxy on this test's port)."""
        filters = [
            f"org.shipway.app={self.name}",
            *(f"org.shipway.{k}={v}" for k, v in labels.items()),
        ]
        client = self.local(host)
        try:
            found = listed(client, label=filters)
            if labels.get("kind", "proxy") == "proxy" and set(labels) <= {"kind"}:
                # the host's shared proxy on this test's own port (no app's label)
                shared = [f"org.shipway.proxy.port={self.port}", "org.shipway.kind=proxy"]
                found += listed(client, label=shared)
            return found
        finally:
            client.close()

    def cleanup(self) -> None:
        for host in (self.env.a, self.env.b):
            client = self.local(host)
            try:
                label = {"label": [f"org.shipway.app={self.name}"]}
                for c in listed(client, **label):
                    with contextlib.suppress(docker.errors.APIError):
                        removed(client, str(c.id))
                for v in client.volumes.list(filters=label):
                    with contextlib.suppress(docker.errors.APIError):
                        v.remove(force=True)
                # the shared proxy of this test's own port (no app's: not labelled with it)
                for port in (self.port, *self.more_ports):
                    for name in (f"shipway-proxy-{port}", f"shipway-proxy-{port}-lock"):
                        with contextlib.suppress(docker.errors.APIError):
                            removed(client, name)
                    for volume in (f"shipway-proxy-{port}", f"shipway-proxy-{port}-data"):
                        with contextlib.suppress(docker.errors.APIError):
                            client.volumes.get(volume).remove(force=True)
                for n in client.networks.list(filters=label):
                    with contextlib.suppress(docker.errors.APIError):
                        n.remove()
            finally:
                client.close()
        self.env.untag(self.name)


@pytest.fixture
def ssh_env(docker_env: DockerEnv, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    environ = ssh_environ(docker_env)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    return environ


@pytest.fixture
def deployment(
    docker_env: DockerEnv, ssh_env: dict[str, str], tmp_path: Path
) -> Iterator[Deployment]:
    d = Deployment(
        env=docker_env,
        name=f"t{uuid.uuid4().hex[:8]}",
        dir=tmp_path,
        port=free_port(),
    )
    try:
        yield d
    finally:
        d.cleanup()
