"""The Docker SDK, imported without its SSH transport until an ssh:// URL needs it.

``import docker`` imports ``docker.transport.sshconn``, hence paramiko and, through
``paramiko.config``, invoke: about 80 ms of CPU of every command that touches a Docker
engine, whatever the host (``import docker``: ~175 ms with it, ~95 ms without, here).
shipway's ssh:// hosts do use that module (:mod:`.docker.sshpool` subclasses its adapter,
pool and connection), but a unix:// host never does.

:func:`load` imports the SDK the way it is imported where its optional paramiko is not
installed (``docker[ssh]`` is an extra): ``docker/transport/__init__.py`` and
``docker/api/client.py`` each import the SSH adapter inside ``try: … except ImportError:
pass``, and a ``None`` in ``sys.modules`` makes an import raise ``ModuleNotFoundError`` (the
Python reference, "The import system", *The module cache*). The marker is taken out as soon
as ``docker`` is imported, so a later ``import docker.transport.sshconn`` loads the module
as usual; and the two names those ``try`` blocks would have bound are bound to stand-ins that
import the module on first use (:func:`_lazy_adapter`, and a module ``__getattr__`` on
``docker.transport``, PEP 562). So any code in the process that gives the SDK an ssh:// URL
(``docker.from_env`` with ``DOCKER_HOST=ssh://…``, ``DockerClient(base_url="ssh://…")``)
gets the SDK's own SSH adapter, as without :func:`load`, and only then pays for paramiko.

Binding those two names is the one part that reaches into the SDK's modules; the test
``tests/backends/docker/test_sdk_imports.py`` fails if a version of the SDK stops matching
(and :func:`load` binds nothing where the names are already there).
"""

from __future__ import annotations

import sys
from typing import Any

SSHCONN = "docker.transport.sshconn"


def load() -> None:
    """Import the Docker SDK without its SSH transport, unless it is imported already."""
    if "docker" in sys.modules or SSHCONN in sys.modules:
        return
    sys.modules[SSHCONN] = None  # type: ignore[assignment]  # "not installed", for one import
    try:
        import docker
        import docker.api.client
        import docker.transport
    finally:
        if sys.modules.get(SSHCONN, ...) is None:
            del sys.modules[SSHCONN]
    if not hasattr(docker.api.client, "SSHHTTPAdapter"):
        docker.api.client.SSHHTTPAdapter = _lazy_adapter  # type: ignore[attr-defined]
    if not hasattr(docker.transport, "SSHHTTPAdapter"):
        vars(docker.transport)["__getattr__"] = _transport_attr  # where PEP 562 looks


def _lazy_adapter(*args: Any, **kwargs: Any) -> Any:
    """``docker.api.client``'s ``SSHHTTPAdapter(...)`` for an ssh:// base URL: the SDK's
    own adapter, its module (and paramiko) imported now."""
    from docker.transport.sshconn import SSHHTTPAdapter

    return SSHHTTPAdapter(*args, **kwargs)


def _transport_attr(name: str) -> Any:
    """``docker.transport.SSHHTTPAdapter``, imported when first asked for."""
    if name == "SSHHTTPAdapter":
        from docker.transport.sshconn import SSHHTTPAdapter

        return SSHHTTPAdapter
    raise AttributeError(f"module 'docker.transport' has no attribute {name!r}")
