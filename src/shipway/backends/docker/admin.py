"""The proxy's Caddy admin API on a unix socket in the proxy's own volume: a switch without
an ``exec``.

Caddy's admin API listens on ``admin.sock`` in the proxy's config volume (not on a TCP
port: nothing of it is exposed anywhere). That file lives under the engine's data root on
the host (``/var/lib/docker/volumes/<volume>/_data``), where only the engine's own user
(root) may go — who can use the engine already — so reaching it adds no new way in. A
config change (a switch needs none: :mod:`.caddy`) that can reach it (an engine on a
local socket; an SSH host, through the SSH connection, when its user may use the socket)
posts the new configuration there: about
2 ms of Caddy's own time against an ``exec`` of ``caddy reload`` (create, start and
inspect an exec, Caddy's binary started in the container: 67 ms on a quiet test host,
0.2 s or more under the benchmark's load: docs/docker.md).

What must never happen: another proxy reconfigured in its place. A path on this machine
need not be the engine's own (an engine behind a forwarded socket reports paths of its
machine; another engine here may run the same app and slot, with the same volume name and
configuration). So each proxy's configuration carries its container's id (``@id`` on the
server, :func:`identity`), and the socket is used only when Caddy there answers for that
id; otherwise (and when it cannot be reached, or the outcome of a load is unknown) the
reload is the ``exec`` as before, which reloads the same files, so a load cut off half-way
is safely done again.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

from docker.models.containers import Container

from shipway.backends.docker import caddy
from shipway.backends.docker.connection import HostConnection

#: how long a call on the admin socket may take (Caddy answers a load once it runs)
TIMEOUT = 30.0


class Unusable(Exception):
    """The socket is not this proxy's, cannot be reached, or a load's outcome is unknown:
    reload by ``exec`` instead."""


class Refused(Exception):
    """Caddy refused the configuration (its message); the old one still runs."""


def identity(container_id: str) -> str:
    """The ``@id`` a proxy's configuration carries: its container's id."""
    return f"shipway-proxy-{container_id}"


def host_socket(proxy: Container, config_dir: str) -> str | None:
    """Where the admin socket is on the proxy's host: in the volume mounted at
    ``config_dir`` (None when the engine does not say where that volume is)."""
    for mount in proxy.attrs.get("Mounts") or []:
        if mount.get("Destination") == config_dir and mount.get("Type") == "volume":
            source = str(mount.get("Source") or "")
            if source.startswith("/"):
                return f"{source.rstrip('/')}/{caddy.ADMIN_SOCKET}"
    return None


class _Connection(http.client.HTTPConnection):
    """HTTP over an already open stream (a unix socket here, or an SSH channel to one)."""

    def __init__(self, stream: Any) -> None:
        super().__init__("localhost", timeout=TIMEOUT)
        self.sock = stream

    def connect(self) -> None:  # only once: the stream is the connection
        raise OSError("the admin socket's connection closed")


def _call(
    conn: _Connection, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    # an empty Host, as HTTP says for a URI with no host: what Caddy admits on a unix socket
    headers = {"Host": ""}
    if body is not None:
        # must-revalidate: loaded even when it is the config Caddy runs (caddy reload --force)
        headers |= {"Content-Type": "application/json", "Cache-Control": "must-revalidate"}
    conn.request(method, path, body=body, headers=headers)
    answer = conn.getresponse()
    return answer.status, answer.read()


def load(conn: HostConnection, path: str, proxy_id: str, config: bytes) -> None:
    """Load ``config`` into the proxy whose container id is ``proxy_id`` through its admin
    socket at ``path`` on the host. Raises :class:`Refused` when Caddy refused it,
    :class:`Unusable` when it was not loaded this way (or may not have been)."""
    try:
        stream = conn.unix(path, TIMEOUT)
    except OSError as exc:
        raise Unusable(str(exc)) from exc
    http_conn = _Connection(stream)
    try:
        try:
            status, _ = _call(http_conn, "GET", f"/id/{identity(proxy_id)}")
        except (OSError, http.client.HTTPException) as exc:
            raise Unusable(f"{path}: {exc}") from exc
        if status != 200:
            raise Unusable(f"{path}: not this proxy's admin API (GET /id: {status})")
        try:
            status, answer = _call(http_conn, "POST", "/load", config)
        except (OSError, http.client.HTTPException) as exc:  # loaded or not: unknown
            raise Unusable(f"{path}: {exc}") from exc
        if status != 200:
            raise Refused(_error_of(answer) or f"HTTP {status}")
    finally:
        http_conn.close()


def _error_of(answer: bytes) -> str:
    try:
        data = json.loads(answer)
    except ValueError:
        return answer.decode(errors="replace").strip()[:300]
    return str(data.get("error", "") if isinstance(data, dict) else data)[:300]
