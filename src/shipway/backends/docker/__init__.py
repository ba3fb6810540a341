"""The Docker hosts backend: an app's processes as containers on one or many Docker engines
(this machine's socket, or ``ssh://user@host``), a health-gated switch through a proxy on
each host, release records and the lock on the first host. See docs/docker.md.
"""

from __future__ import annotations

from shipway.backends.docker.backend import DockerBackend
from shipway.errors import InputError
from shipway.spec.model import App, Slot


def connect(app: App, slot: Slot) -> DockerBackend:
    """The backend for a docker slot. Opens nothing yet: each host is connected (and its
    SSH key verified) when first used."""
    routes = slot.routes if slot.routes is not None else app.routes
    tls = [r.host for r in routes if r.tls_secret]
    if tls:
        raise InputError(
            f"slot {slot.name!r}: routes with tls_secret ({', '.join(tls)}) are not supported "
            "on docker hosts yet: the proxy serves plain HTTP (hint: terminate TLS in front of "
            "it, and drop tls_secret from these routes)"
        )
    return DockerBackend(app, slot)


__all__ = ["DockerBackend", "connect"]
