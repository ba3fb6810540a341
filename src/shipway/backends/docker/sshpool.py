"""An SSH host's Engine API connections: channels of the host's one SSH connection, pooled.

Imported only when an ssh:// host is first used (:meth:`.connection.HostConnection.client`):
it builds on the Docker SDK's SSH transport, hence paramiko, which a command on local
sockets never loads (:mod:`shipway.backends.dockersdk`).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, cast

import paramiko
from docker.constants import DEFAULT_MAX_POOL_SIZE
from docker.transport.sshconn import SSHConnection, SSHConnectionPool, SSHHTTPAdapter

from shipway.backends.docker.machines import HostAddress
from shipway.backends.docker.streamlocal import open_streamlocal
from shipway.errors import BackendError


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


class OnePoolAdapter(SSHHTTPAdapter):
    """docker-py's SSH adapter keys its connection pools by the whole request URL, so every
    new path (each container's ``/json``, each exec) opened a new channel and ran a new
    ``docker system dial-stdio`` on the host: about 0.4 s per Engine API call over SSH on
    the test host. One pool per host instead, shared by its clients (urllib3's pool is
    thread-safe): its HTTP connections (channels) are kept alive and reused, as they are
    on a unix socket. Closing a client leaves the pool to its
    :class:`~shipway.backends.docker.connection.HostConnection`."""

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
