"""A host reached over SSH whose connection died (the network dropped it) is connected
again on its next use: the cached API client, whose pool still holds the dead transport,
is rebuilt with it — not kept failing until the process ends."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import requests.sessions

from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.retrying import RetryingAPIClient
from shipway.backends.retry import RetryPolicy
from tests.backends.docker.conftest import SLOT, Deployment
from tests.backends.local.conftest import eventually


def test_a_dead_ssh_transport_is_replaced_on_the_next_call(deployment: Deployment) -> None:
    env = deployment.env
    app = deployment.write(hosts=[env.b])  # host B: over SSH
    assert deployment.deploy().exit_code == 0
    backend = deployment.backend()
    target = app.slots.target(SLOT)
    try:
        assert [r.revision for r in backend.read_records(target)] == [1]
        conn = backend.connections[backend.primary]
        assert conn._ssh is not None
        transport = conn._ssh.get_transport()
        assert transport is not None and transport.is_active()
        # the network drops the connection: the TCP stream is torn down under paramiko
        transport.sock.shutdown(socket.SHUT_RDWR)
        transport.join(timeout=10)  # its reader thread sees the end and stops
        assert not transport.is_active()

        assert [r.revision for r in backend.read_records(target)] == [1]  # reconnected
        again = conn._ssh.get_transport()
        assert again is not None and again is not transport and again.is_active()
        assert backend.status(target)[0].ready == 1
    finally:
        backend.close()


def _pool_with_spares(deployment: Deployment) -> tuple[Any, HostConnection, Any]:
    """A backend on host B (over SSH), its connection, and the connection's pool of
    channels once its spares are open and idle."""
    env = deployment.env
    deployment.write(hosts=[env.b.dialed()])  # a new channel is a dial-stdio: the slow kind
    backend = deployment.backend()
    conn = backend.connections[backend.primary]
    conn.client().ping()
    adapter = conn._adapter
    assert adapter is not None
    pool = adapter._pool
    eventually(lambda: pool._idle() >= pool.spare, what=f"{pool.spare} idle channels")
    return backend, conn, pool


def test_channels_taken_over_by_the_engine_are_replaced_ahead_of_need(
    deployment: Deployment,
) -> None:
    """An exec's output or an events stream keeps its SSH channel; the next call must not
    wait for a new one (a ``dial-stdio`` on the host) — spares are opened in the
    background whenever a call takes a channel."""
    backend, conn, pool = _pool_with_spares(deployment)
    try:
        spare = pool.spare
        taken = [pool._get_conn() for _ in range(spare)]  # as hijacked calls keep theirs
        assert all(c.sock is not None for c in taken)  # they were open already
        # and had answered: dial-stdio had started on the host before a call took them
        assert all(c.sock.in_window_sofar > 0 for c in taken)
        eventually(lambda: pool._idle() >= spare, what="the spares replaced")
        for c in taken:
            c.close()
        assert conn.client().ping()
    finally:
        backend.close()


def test_a_call_gets_an_open_channel_while_one_waits_idle(deployment: Deployment) -> None:
    """A call whose channel was taken over or closed gives back an empty slot, at the end
    of the pool's LIFO queue that the next call takes from: that call must still get a
    channel already open, not open one of its own."""
    backend, conn, pool = _pool_with_spares(deployment)
    try:
        taken = pool._get_conn()
        taken.close()
        pool._put_conn(None)  # what urllib3 gives back for a connection it closed
        assert pool.pool is not None and pool.pool.queue[-1] is None
        got = pool._get_conn()
        assert got is not None and got.sock is not None  # one of the open ones
        pool._put_conn(got)
        assert conn.client().ping()
    finally:
        backend.close()


def test_a_call_to_a_unix_socket_or_over_ssh_reads_no_proxies_or_netrc(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests looks up the environment's proxies and ~/.netrc for every call of a session
    that trusts the environment (a fifth to two fifths of a small call's CPU); neither applies to
    an engine's Unix socket or shipway's SSH channels, so those clients do not look."""
    env = deployment.env
    deployment.write(hosts=[env.a, env.b])  # A: its socket; B: over SSH
    backend = deployment.backend()

    def looked(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the environment was read for {args[:1]}")

    try:
        connections = list(backend.connections.values())
        assert {conn.address.over_ssh for conn in connections} == {False, True}
        clients = [conn.client() for conn in connections]  # each asks its engine's version
        with monkeypatch.context() as patch:
            patch.setattr(requests.sessions, "get_environ_proxies", looked)
            patch.setattr(requests.sessions, "get_netrc_auth", looked)
            for client in clients:
                assert client.ping()
                assert client.api.containers(filters={"name": "no-such-container"}) == []
    finally:
        backend.close()
    # an engine reached over TCP keeps the environment's proxies (and its CA bundle)
    tcp = RetryingAPIClient(base_url="tcp://127.0.0.1:2375", version="1.41", policy=RetryPolicy())
    assert tcp.trust_env
