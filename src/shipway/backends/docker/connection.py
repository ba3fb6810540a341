"""One Docker host's connections: its Engine API client, and a way to reach its containers.

Local sockets use the Docker SDK as is. SSH hosts are reached through ONE SSH connection
that shipway opens and verifies itself (:mod:`.trust`); the SDK's paramiko transport is then
given that connection, so docker-py never makes its own (it would read only
``~/.ssh/known_hosts`` and say nothing useful about an unknown key). Each API connection is a
channel that sshd forwards to the engine's socket when the host's URL names it
(``ssh://user@host/var/run/docker.sock``: :mod:`.streamlocal`, nothing started on the host),
else a channel running ``docker system dial-stdio`` on the host, as docker-py's own SSH
transport does; health checks reach a container's address on the host through a ``direct-tcpip``
channel of the same connection (SSH port forwarding), so no container port is ever
published for them. The SSH parts (:mod:`.trust`, :mod:`.sshpool`, :mod:`.streamlocal`, and
paramiko with them) are imported when an SSH host is first used, never for a local socket.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import docker
import docker.errors
from docker.constants import DEFAULT_DOCKER_API_VERSION, MINIMUM_DOCKER_API_VERSION
from docker.utils import version_lt

from shipway.backends.docker.machines import HostAddress
from shipway.backends.docker.retrying import RetryingDockerClient
from shipway.backends.retry import RetryPolicy
from shipway.errors import BackendError

if TYPE_CHECKING:
    import paramiko

    from shipway.backends.docker.sshpool import OnePoolAdapter
    from shipway.backends.docker.trust import SshParams

API_TIMEOUT = 60
# paramiko (imported only for an ssh:// host: .sshpool, .trust) logs a refused forward
# ("channel open FAILED") at ERROR; shipway reports it itself (a health probe that found
# nothing listening), so keep it off stderr unless the application configures logging.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class Stream(Protocol):
    """What a health probe needs of a connection: a socket or an SSH channel."""

    def sendall(self, data: bytes) -> Any: ...

    def recv(self, n: int) -> bytes: ...

    def settimeout(self, timeout: float | None) -> Any: ...

    def close(self) -> Any: ...


class HostConnection:
    """Lazily connected: nothing is opened until the host is first used."""

    def __init__(
        self,
        address: HostAddress,
        *,
        known_hosts: str | None = None,
        base_dir: Path | None = None,
        environ: Mapping[str, str] | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.address = address
        #: how the clients' calls are tried again (:mod:`.retrying`)
        self.policy = policy or RetryPolicy()
        self._known_hosts = known_hosts
        self._base_dir = base_dir
        self._environ = environ
        self._ssh: paramiko.SSHClient | None = None
        self._params: SshParams | None = None
        self._client: docker.DockerClient | None = None
        self._version: str | None = None
        self._adapter: OnePoolAdapter | None = None
        self._lock = threading.RLock()

    @property
    def name(self) -> str:
        return self.address.name

    # -- ssh ---------------------------------------------------------------------------

    def _ssh_alive(self) -> bool:
        transport = self._ssh.get_transport() if self._ssh is not None else None
        return transport is not None and transport.is_active()

    def _ssh_client(self) -> paramiko.SSHClient:
        """The host's one SSH connection; a dead one (the network dropped it, sshd went
        away) is replaced by a new, verified one — and the cached API client, whose
        connection pool still holds the dead transport, with it."""
        from shipway.backends.docker.trust import open_ssh, ssh_params

        with self._lock:
            if not self._ssh_alive():
                if self._ssh is not None:
                    self._drop_dead()
                if self._params is None:
                    self._params = ssh_params(
                        self.address,
                        slot_known_hosts=self._known_hosts,
                        base_dir=self._base_dir,
                        environ=self._environ,
                    )
                self._ssh = open_ssh(self.address, self._params)
            assert self._ssh is not None
            return self._ssh

    def _over_ssh(self, version: str, policy: RetryPolicy) -> docker.DockerClient:
        from shipway.backends.docker.sshpool import OnePoolAdapter

        client = RetryingDockerClient(
            policy,
            base_url=self.address.engine_url,
            use_ssh_client=True,  # a shell-out adapter that opens nothing by itself ...
            version=version,
            timeout=API_TIMEOUT,
        )
        # ... given our verified connection instead, through the host's one pool of channels
        ssh = self._ssh_client()
        if self._adapter is None or self._adapter.ssh_client is not ssh:
            if self._adapter is not None:
                self._adapter.shut()
            self._adapter = OnePoolAdapter(self.address, ssh, API_TIMEOUT)
        client.api.mount("http+docker://ssh", self._adapter)
        return client

    # -- clients -----------------------------------------------------------------------

    def client(self) -> docker.DockerClient:
        """The host's Engine API client (connects, and verifies the host, on first use; over
        SSH, rebuilt when its connection died)."""
        with self._lock:
            if self.address.over_ssh and self._client is not None and not self._ssh_alive():
                self._drop_dead()
            if self._client is None:
                self._client = self.new_client()
            return self._client

    def new_client(self, policy: RetryPolicy | None = None) -> docker.DockerClient:
        """Another client to the same host (for a thread of its own, retrying by
        ``policy``, else the connection's); shares the SSH connection."""
        policy = policy or self.policy
        with self._lock:
            if not self.address.over_ssh:
                problem = socket_problem(self.address)
                if problem is not None:
                    raise BackendError(problem)
                # the engine's API version is asked once (GET /version), not by every client
                local = RetryingDockerClient(
                    policy, base_url=self.address.url, version=self._version or "auto",
                    timeout=API_TIMEOUT,
                )  # fmt: skip
                self._version = self._version or str(local.api.api_version)
                return local
            if self._version is None:
                probe = self._over_ssh(MINIMUM_DOCKER_API_VERSION, policy)
                try:
                    server = str(probe.api.version(api_version=False)["ApiVersion"])
                finally:
                    probe.close()  # closes its channels, not our connection
                self._version = (
                    server if version_lt(server, DEFAULT_DOCKER_API_VERSION) else
                    DEFAULT_DOCKER_API_VERSION
                )  # fmt: skip
            return self._over_ssh(self._version, policy)

    # -- reaching containers -----------------------------------------------------------

    def dial(self, ip: str, port: int, timeout: float) -> Stream:
        """A connection to ``ip:port`` as seen from the host (a container's address on the
        slot's network). Raises OSError when nothing answers there."""
        if not self.address.over_ssh:
            return socket.create_connection((ip, port), timeout=timeout)
        import paramiko

        transport = self._ssh_client().get_transport()
        if transport is None:
            raise OSError(f"host {self.name}: the SSH connection is closed")
        try:
            channel = transport.open_channel(
                "direct-tcpip", (ip, port), ("127.0.0.1", 0), timeout=timeout
            )
        except paramiko.ChannelException as exc:
            raise ConnectionRefusedError(f"{ip}:{port}: {exc}") from exc
        except paramiko.SSHException as exc:
            raise OSError(f"{ip}:{port}: {exc}") from exc
        channel.settimeout(timeout)
        return channel

    def peer(self) -> str | None:
        """The IP address this machine reaches the host at over SSH (None: a local
        socket): what a server of the slot is published on when the spec names none."""
        if not self.address.over_ssh:
            return None
        transport = self._ssh_client().get_transport()
        if transport is None:
            raise OSError(f"host {self.name}: the SSH connection is closed")
        return str(transport.getpeername()[0])

    def unix(self, path: str, timeout: float) -> Stream:
        """A connection to the unix socket ``path`` on the host: here, for an engine on a
        local socket; through the SSH connection (:mod:`.streamlocal`) for an SSH host.
        Raises OSError when it cannot be had (no such socket, not ours to use, a TCP
        engine)."""
        if self.address.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(path)
            except OSError:
                sock.close()
                raise
            return sock
        if not self.address.over_ssh:
            raise OSError(f"host {self.name}: no unix socket of the host is reachable from here")
        import paramiko

        from shipway.backends.docker.streamlocal import open_streamlocal

        transport = self._ssh_client().get_transport()
        if transport is None:
            raise OSError(f"host {self.name}: the SSH connection is closed")
        try:
            channel = open_streamlocal(transport, path, timeout)
        except paramiko.SSHException as exc:  # refused (ChannelException) or no answer
            raise OSError(f"host {self.name}: {path}: {exc}") from exc
        channel.settimeout(timeout)
        return channel

    def warm(self, channels: int) -> None:
        """Connect (as :meth:`client`) and, over SSH, open ``channels`` channels ahead of
        need (see :meth:`.sshpool.OnePoolAdapter.prefill`)."""
        self.client()
        adapter = self._adapter
        if adapter is not None:
            adapter.prefill(channels)

    def _drop_dead(self) -> None:
        """Forget a dead SSH connection, the channel pool on it and the API client mounted
        on that pool (closing what is left of them; a dead transport has nothing to say)."""
        if self._adapter is not None:
            with contextlib.suppress(Exception):
                self._adapter.shut()
            self._adapter = None
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()  # its adapter's close leaves the pool: shut above
            self._client = None
        if self._ssh is not None:
            with contextlib.suppress(Exception):
                self._ssh.close()
            self._ssh = None

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.close()
                self._client = None
            if self._adapter is not None:
                self._adapter.shut()
                self._adapter = None
            if self._ssh is not None:
                self._ssh.close()
                self._ssh = None


def socket_problem(
    address: HostAddress,
    who: str | None = None,
    where: str = "in the slot's hosts",
) -> str | None:
    """Why a local host's socket cannot be an engine at all (it does not exist, or is not a
    socket), else None. Not a transient fault: no retry makes a socket appear, so it is
    said at once, with the path and what to do. ``who``: what the engine is to the user
    (default: ``host NAME``); ``where``: where its socket is named."""
    path = address.path
    if address.over_ssh or not path:
        return None
    who = who or f"host {address.name}"
    fix = (
        f"start the Docker engine that listens there, or name the socket it does listen on "
        f"{where} (unix:///var/run/docker.sock, or ssh://USER@HOST for another machine)"
    )
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"{who}: no Docker socket at {path} (hint: {fix})"
    except OSError as exc:
        why = exc.strerror or str(exc)
        return f"{who}: cannot reach the Docker socket {path}: {why} (hint: {fix})"
    if not stat.S_ISSOCK(mode):
        return f"{who}: {path} is not a socket (hint: {fix})"
    return None


def reachable(conn: HostConnection) -> None:
    """Raise BackendError unless the host's engine answers."""
    try:
        conn.client().ping()
    except docker.errors.DockerException as exc:
        raise BackendError(f"host {conn.name}: the Docker engine does not answer: {exc}") from exc
