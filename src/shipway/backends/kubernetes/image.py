"""What image a Kubernetes slot will run, and what kind it is.

The cluster cannot tell shipway how an image was built, so the image is inspected through
the Docker Engine API of a reachable engine (``DOCKER_HOST``, else the default socket):
its labels and environment say pack / herokuish / dockerfile
(:mod:`shipway.backends.imagemeta`), its ``RepoDigests`` the digest to pin. When no engine
has the image (reaped, or built elsewhere), this says so with ``None`` and the engine falls
back to the deployed release's recorded metadata — never to a silent "dockerfile".
"""

from __future__ import annotations

from typing import Any

from shipway.backends import imagemeta
from shipway.backends.protocol import ResolvedImage

INSPECT_TIMEOUT = 5


def inspect(ref: str) -> dict[str, Any] | None:
    """The engine's inspect attributes of ``ref``, or None when no reachable engine has it."""
    import docker
    import docker.errors
    import requests.exceptions

    try:
        client = docker.from_env(timeout=INSPECT_TIMEOUT)
    except docker.errors.DockerException:
        return None
    try:
        attrs: dict[str, Any] = client.images.get(ref).attrs
        return attrs
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
        return None
    finally:
        client.close()


def resolve(ref: str) -> ResolvedImage:
    """``ref`` with its digest (from the reference itself, else the engine) and its kind."""
    digest = ref.split("@", 1)[1] if "@" in ref else None
    attrs = inspect(ref)
    if attrs is None:
        return ResolvedImage(ref=ref, digest=digest)
    return ResolvedImage(
        ref=ref,
        digest=digest or imagemeta.repo_digest(attrs, ref),
        meta=imagemeta.classify(attrs),
    )
