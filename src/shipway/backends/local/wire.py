"""An accessory's server on this machine asked in its own protocol (its port on loopback):
does it answer, which version is it (:mod:`shipway.backends.wire` speaks it). No client
library and no subprocess, so ``status`` starts nothing; every socket has a timeout."""

from __future__ import annotations

import socket

from shipway.backends.accessories import Credentials
from shipway.backends.wire import answers as over
from shipway.backends.wire import version_over

PROBE_TIMEOUT = 2.0


def connect(creds: Credentials, timeout: float = PROBE_TIMEOUT) -> socket.socket:
    """A connection to the accessory's port on loopback, reads bounded by ``timeout``."""
    sock = socket.create_connection(("127.0.0.1", creds.port), PROBE_TIMEOUT)
    sock.settimeout(timeout)
    return sock


def answers(kind: str, creds: Credentials) -> bool:
    """Whether the server on the accessory's port takes the app's login (:func:`.answers`
    of :mod:`shipway.backends.wire`)."""
    try:
        with connect(creds) as sock:
            return over(kind, sock, creds)
    except OSError:
        return False


def server_version(kind: str, creds: Credentials) -> str | None:
    """The running server's own version, or None when it does not answer or refuses the
    login."""
    try:
        with connect(creds) as sock:
            return version_over(kind, sock, creds)
    except OSError:
        return None
