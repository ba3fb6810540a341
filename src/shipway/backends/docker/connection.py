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
published for them.
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
from typing import Any, Protocol, cast

import docker
import docker.errors
import paramiko
from docker.constants import (
    DEFAULT_DOCKER_API_VERSION,
    DEFAULT_MAX_POOL_SIZE,
    MINIMUM_DOCKER_API_VERSION,
)
from docker.transport.sshconn import SSHConnection, SSHConnectionPool, SSHHTTPAdapter
from docker.utils import version_lt

from shipway.backends.docker.machines import HostAddress
from shipway.backends.docker.retrying import RetryingDockerClient
from shipway.backends.docker.streamlocal import open_streamlocal
from shipway.backends.docker.trust import SshParams, open_ssh, ssh_params
from shipway.backends.retry import RetryPolicy
from shipway.errors import BackendError

API_TIMEOUT = 60
# paramiko logs a refused forward ("channel open FAILED") at ERROR; shipway reports it
# itself (a health probe that found nothing listening), so keep it off stderr unless the
# application configures logging.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class Stream(Protocol):
    """What a health probe needs of a connection: a socket or an SSH channel."""

    def sendall(self, data: bytes) -> Any: ...

    def recv(self, n: int) -> bytes: ...

    def settimeout(self, timeout: float | None) -> Any: ...

    def close(self) -> Any: ...


class _ForwardedConnection(SSHConnection):
    """An API connection that is a channel sshd forwards to the engine's socket on the host
    (:func:`.streamlocal.open_streamlocal`), instead of a ``dial-stdio`` session."""

    def __init__(self, transport: paramiko.Transport, timeout: int, host: str, path: str) -> None:
        super().__init__(transport, timeout, host)
        self._path = path

    def connect(self) -> None:
        assert self.ssh_transport is not None  # given at __init__
        try:
            channel = open_streamlocal(self.ssh_transport, self._path, self.timeout)
        except paramiko.ChannelException as exc:
            raise BackendError(_refused(str(self.ssh_host), self._path, exc)) from exc
        channel.settimeout(self.timeout)
        self.sock = cast(Any, channel)


def _refused(host: str, path: str, exc: paramiko.ChannelException) -> str:
    why = (
        "sshd does not forward sockets (AllowStreamLocalForwarding no, or DisableForwarding)"
        if exc.code == 1
        else "nothing there answers, or the SSH user may not use it"
    )
    return (
        f"host {host}: cannot reach the Docker engine's socket {path} through SSH: {why} "
        f"(sshd said: {exc.text}) (hint: check the path on the host (`ls -l {path}`) and "
        "that the SSH user is in the docker group; or leave the path out of the host's URL, "
        "and each connection runs `docker system dial-stdio` on the host instead)"
    )


class _SparePool(SSHConnectionPool):
    """The host's channels, with a few always open ahead of need. A call whose connection
    the engine takes over (an exec's output, the events stream a health gate follows) never
    gives its channel back, so the next call would open one: a ``dial-stdio`` on the host,
    0.4 s or more on a busy one, in the middle of a switch. Whenever a call takes a channel
    and fewer than ``spare`` are left idle, one is opened in the background, and is given to
    a call only once it has answered."""

    spare = 2

    def __init__(
        self, ssh: paramiko.SSHClient, timeout: int, maxsize: int, host: str, path: str | None
    ) -> None:
        super().__init__(ssh_client=ssh, timeout=timeout, maxsize=maxsize, host=host)
        transport = ssh.get_transport()
        self._forward = (transport, timeout, host, path) if transport and path else None
        self._opening = 0
        self._spare_lock = threading.Lock()

    def _new_conn(self) -> Any:
        if self._forward is None:
            return super()._new_conn()
        return _ForwardedConnection(*self._forward)

    def _get_conn(self, timeout: float | None = None) -> Any:
        self._open_first()
        conn = super()._get_conn(timeout)
        self.top_up(self.spare)
        return conn

    def _open_first(self) -> None:
        """Put the open channels where the pool's next ``get()`` looks. Its queue is LIFO,
        and a call whose channel was taken over or closed gives back an empty slot
        (``None``) at that end: the next call would open a channel (a ``dial-stdio``, 0.3 s)
        while open ones wait idle beneath it."""
        slots = self.pool
        if slots is None:
            return
        with slots.mutex:
            items = list(slots.queue)
            empty = [c for c in items if c is None or c.sock is None]
            if empty and items[-1] in empty:
                slots.queue.clear()
                slots.queue.extend(empty + [c for c in items if c not in empty])

    def _idle(self) -> int:
        slots = self.pool
        if slots is None:
            return 0
        return sum(1 for c in list(slots.queue) if c is not None and c.sock is not None)

    def top_up(self, count: int) -> None:
        """Open channels in the background until ``count`` are idle (or being opened)."""
        with self._spare_lock:
            wanted = count - self._idle() - self._opening
            if wanted <= 0:
                return
            self._opening += wanted
        for _ in range(wanted):
            threading.Thread(target=self._open_one, daemon=True).start()

    def _open_one(self) -> None:
        try:
            conn = self._new_conn()
            conn.connect()
            # the channel's first answer waits for ``dial-stdio`` to start on the host (0.2 s
            # on a quiet one): paid here, in the background, not by the call that takes it
            conn.request("GET", "/_ping")
            conn.getresponse().read()
            slots = self.pool
            # it takes the place of an empty slot (None) of the pool's queue — a LIFO queue's
            # get() would hand back the connection last given back instead, and lose it
            placed = False
            if slots is not None:  # else the pool was closed meanwhile
                with slots.mutex:
                    if None in slots.queue:  # else it is full
                        slots.queue.remove(None)
                        slots.queue.append(conn)
                        slots.not_empty.notify()
                        placed = True
            if not placed:
                conn.close()
        except Exception:  # a spare that could not be opened: the next call opens its own
            logging.getLogger(__name__).debug("a spare SSH channel did not open", exc_info=True)
        finally:
            with self._spare_lock:
                self._opening -= 1


class _OnePoolAdapter(SSHHTTPAdapter):
    """docker-py's SSH adapter keys its connection pools by the whole request URL, so every
    new path (each container's ``/json``, each exec) opened a new channel and ran a new
    ``docker system dial-stdio`` on the host: about 0.4 s per Engine API call over SSH on
    the test host. One pool per host instead, shared by its clients (urllib3's pool is
    thread-safe): its HTTP connections (channels) are kept alive and reused, as they are
    on a unix socket. Closing a client leaves the pool to its :class:`HostConnection`."""

    def __init__(self, address: HostAddress, ssh: paramiko.SSHClient, timeout: int) -> None:
        super().__init__(address.engine_url, timeout=timeout, shell_out=True)
        self.ssh_client = ssh
        self._pool = _SparePool(ssh, timeout, DEFAULT_MAX_POOL_SIZE, address.name, address.path)

    def get_connection(self, url: str | bytes, proxies: Any = None) -> SSHConnectionPool:
        return self._pool

    def prefill(self, count: int) -> None:
        """Open ``count`` channels ahead of need, in the background (:class:`_SparePool`)."""
        self._pool.top_up(count)

    def close(self) -> None:
        pass  # a client's close: the pool is the host's (:meth:`shut`)

    def shut(self) -> None:
        self._pool.close()  # its channels; the SSH connection is the HostConnection's


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
        self._adapter: _OnePoolAdapter | None = None
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
            self._adapter = _OnePoolAdapter(self.address, ssh, API_TIMEOUT)
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
        need (see :meth:`_OnePoolAdapter.prefill`)."""
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
