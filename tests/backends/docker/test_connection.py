"""A host reached over SSH whose connection died (the network dropped it) is connected
again on its next use: the cached API client, whose pool still holds the dead transport,
is rebuilt with it — not kept failing until the process ends."""

from __future__ import annotations

import socket

from tests.backends.docker.conftest import SLOT, Deployment


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
