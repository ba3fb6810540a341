"""The backend's edge: what the Docker SDK, requests, paramiko and the OS raise becomes
shipway's errors here, and nowhere else.

Every module of this package that talks to an engine runs its calls inside :func:`edge`,
so no library exception ever reaches the engine layer: it always gets a
:class:`~shipway.errors.BackendError` that says where it happened. The calls themselves
were tried again first where they may be (:mod:`.retrying`, the shared retry policy); what
:func:`edge` says it is doing names them in each retry line.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import docker.errors
import requests

from shipway.backends import retry
from shipway.errors import BackendError, ShipwayError


@contextlib.contextmanager
def edge(what: str) -> Iterator[None]:
    """Translate what the Docker SDK, requests, paramiko and the OS raise into shipway's
    errors (most specific first), each saying where it happened."""
    try:
        with retry.doing(what):
            yield
    except ShipwayError:
        raise
    except docker.errors.ImageNotFound as exc:
        raise BackendError(f"{what}: image not found: {explain(exc)}") from exc
    except docker.errors.NotFound as exc:
        raise BackendError(f"{what}: not found: {explain(exc)}") from exc
    except docker.errors.APIError as exc:
        raise BackendError(
            f"{what}: the Docker engine refused: {explain(exc)}{retry.gave_up(exc.response)}"
        ) from exc
    except docker.errors.DockerException as exc:
        raise BackendError(f"{what}: {exc}") from exc
    except requests.exceptions.RequestException as exc:
        raise BackendError(
            f"{what}: the Docker engine did not answer: {exc}{retry.gave_up(exc)}"
        ) from exc
    except Exception as exc:
        if isinstance(exc, _ssh_exception()):
            raise BackendError(f"{what}: SSH failed: {exc}") from exc
        if isinstance(exc, OSError):
            raise BackendError(f"{what}: {exc}") from exc
        raise


def _ssh_exception() -> type[Exception] | tuple[()]:
    """paramiko's ``SSHException``, if paramiko is loaded: only an ssh:// host's connection
    loads it (:mod:`.sshpool`), and nothing else raises it, so a command on local sockets
    never imports paramiko just to name its exception. ``()``: matches nothing."""
    paramiko = sys.modules.get("paramiko")
    found = getattr(paramiko, "SSHException", None)
    return found if isinstance(found, type) and issubclass(found, Exception) else ()


def explain(exc: docker.errors.APIError) -> str:
    """The engine's own words for a refusal (its ``explanation``), else the exception's."""
    text = exc.explanation if isinstance(exc.explanation, str) else str(exc)
    return text.strip() or str(exc)
