"""The Docker hosts backend: an app's processes as containers on one or many Docker engines
(this machine's socket, or ``ssh://user@host``), a health-gated switch through a proxy on
each host, release records and the lock on the first host. See docs/docker.md.
"""

from __future__ import annotations

from shipway.backends import dockersdk

# First, before any module of this package imports docker (a package's __init__ runs before
# its modules): the SDK without its SSH transport, which only an ssh:// host loads, and with
# it paramiko and invoke (~80 ms of every command otherwise). See shipway.backends.dockersdk.
dockersdk.load()

from shipway.backends.docker.backend import DockerBackend, connect  # noqa: E402

__all__ = ["DockerBackend", "connect"]
