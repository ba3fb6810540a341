"""An SSH host whose URL names its engine's socket (``ssh://root@B/run/…/docker.sock``): each
Engine API connection is a channel sshd forwards to that socket (OpenSSH's
``direct-streamlocal``), so nothing is started on the host for it; the URL without a path
keeps running ``docker system dial-stdio`` there, as ``docker -H ssh://`` does. On the test
environment's real host B (its own sshd and engine)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

import paramiko
import pytest

from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.sshpool import _refused, _SparePool
from shipway.backends.docker.streamlocal import open_streamlocal
from shipway.errors import BackendError
from tests.backends.docker.conftest import SLOT, Deployment, Lines
from tests.backends.local.conftest import eventually
from tests.testenv.docker import DockerHost


def _my_tcp_ports() -> set[int]:
    """The local ports of this process's TCP sockets (its SSH connections among them)."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def dial_stdio_processes() -> set[int]:
    """The pids of the ``docker system dial-stdio`` processes on this machine (host B shares
    its process table: it is a network namespace of its own, not a machine) that serve this
    process's own SSH connections (their sshd's ``SSH_CLIENT`` names one of its ports):
    other tests, running at once, start their own."""
    mine = _my_tcp_ports()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if not (argv[1:4] == [b"system", b"dial-stdio", b""] and argv[0].endswith(b"docker")):
            continue
        client = next((v for v in environ if v.startswith(b"SSH_CLIENT=")), b"")
        words = client.split(b"=", 1)[-1].split()
        if len(words) >= 2 and words[1].isdigit() and int(words[1]) in mine:
            found.add(int(entry.name))
    return found


def channels_held(deployment: Deployment, host: DockerHost, count: int) -> tuple[Any, set[int]]:
    """A backend on ``host`` alone, ``count`` of its API connections open and held (as
    streams the engine keeps do), and the ``dial-stdio`` processes started meanwhile."""
    before = dial_stdio_processes()
    deployment.write(hosts=[host])
    backend = deployment.backend()
    conn = backend.connections[backend.primary]
    assert conn.client().ping()
    adapter = conn._adapter
    assert adapter is not None
    pool = adapter._pool
    held = [pool._get_conn() for _ in range(count)]
    for c in held:  # each answers: whatever serves it on the host is running by then
        c.request("GET", "/_ping")
        answer = c.getresponse()
        assert answer.status == 200 and answer.data == b"OK"
    eventually(lambda: pool._idle() >= pool.spare, what=f"{pool.spare} spare channels open")
    started = dial_stdio_processes() - before
    for c in held:
        pool._put_conn(c)
    return backend, started


def test_a_socket_named_in_the_url_is_reached_with_nothing_started_on_the_host(
    deployment: Deployment,
) -> None:
    # the control: the URL without a path starts a dial-stdio per connection, and the
    # count above sees them
    backend, started = channels_held(deployment, deployment.env.b.dialed(), 3)
    backend.close()
    assert len(started) >= 3 + _SparePool.spare  # the three held, and the spares
    backend, started = channels_held(deployment, deployment.env.b.forwarded(), 3)
    try:
        assert started == set()
        assert backend.connections[backend.primary].client().ping()
    finally:
        backend.close()


def test_a_release_rolls_on_both_hosts_with_b_reached_by_dial_stdio(
    deployment: Deployment,
) -> None:
    """The other tests reach B through its socket's path; a URL without one (each
    connection a dial-stdio session) deploys and rolls the same."""
    env = deployment.env
    b = env.b.dialed()
    deployment.write(hosts=[env.a, b])
    first = deployment.deploy()
    assert first.ok, first.line()
    deployment.write(hosts=[env.a, b], image=env.images.v2)
    second = deployment.deploy()
    assert second.ok, second.line()
    for host in (env.a, b):
        assert deployment.get(host)[1].strip() == "v2"
    backend = deployment.backend()
    try:
        target = deployment.app().slots.target(SLOT)
        assert [r.revision for r in backend.read_records(target)] == [1, 2]
        # the host keeps the name it has with the path: unit keys do not change
        assert [h.name for h in backend.host_addresses][1] == env.b.address
    finally:
        backend.close()


def test_a_socket_that_is_not_there_is_an_error_that_names_it(deployment: Deployment) -> None:
    env = deployment.env
    missing = "/run/shipway-testenv/b/nothing-here.sock"
    host = dataclasses.replace(env.b, url=env.b.dialed().url + missing)
    deployment.write(hosts=[host])
    backend = deployment.backend()
    try:
        with pytest.raises(BackendError) as caught:
            backend.connections[backend.primary].client().ping()
    finally:
        backend.close()
    text = str(caught.value)
    assert missing in text and "dial-stdio" in text and "docker group" in text
    # a deploy to A and that B stops there, and leaves nothing behind on A (the lock taken
    # there is let go)
    deployment.write(hosts=[env.a, host])
    lines = Lines()
    with pytest.raises(BackendError, match=r"nothing-here\.sock"):
        deployment.deploy(lines)
    assert "host docker-a: nothing done" in lines.text()
    assert deployment.containers(env.a) == []


def test_a_refused_channel_leaves_the_ssh_connection_usable(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.b.forwarded()])
    backend = deployment.backend()
    try:
        conn: HostConnection = backend.connections[backend.primary]
        transport = conn._ssh_client().get_transport()
        assert transport is not None
        with pytest.raises(paramiko.ChannelException) as refused:
            open_streamlocal(transport, "/run/shipway-testenv/b/nothing-here.sock", 10)
        assert refused.value.code == 2  # OPEN_CONNECT_FAILED
        assert transport.is_active()
        socket_path = env.b.socket.removeprefix("unix://")
        channel = open_streamlocal(transport, socket_path, 10)
        try:
            channel.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := channel.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"OK")
        finally:
            channel.close()
    finally:
        backend.close()


def test_forwarding_refused_by_sshd_is_said_as_such() -> None:
    text = _refused("web1", "/var/run/docker.sock", paramiko.ChannelException(1, "prohibited"))
    assert "AllowStreamLocalForwarding" in text and "/var/run/docker.sock" in text
