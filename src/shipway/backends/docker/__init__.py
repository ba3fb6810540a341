"""The Docker hosts backend: an app's processes as containers on one or many Docker engines
(this machine's socket, or ``ssh://user@host``), a health-gated switch through a proxy on
each host, release records and the lock on the first host. See docs/docker.md.
"""

from __future__ import annotations

from shipway.backends.docker.backend import DockerBackend, connect

__all__ = ["DockerBackend", "connect"]
