"""What image a Kubernetes slot will run, and what kind it is.

The cluster cannot tell shipway how an image was built. The image is inspected through the
Docker Engine API of a reachable engine (``DOCKER_HOST``, else the default socket) when
that engine has it; otherwise its manifest and config are read from the registry the
reference names (:mod:`shipway.backends.registry`, no pull). Either way its labels and
environment say pack / herokuish / dockerfile (:mod:`shipway.backends.imagemeta`) and the
digest to pin is known. When neither can tell, this says so with ``None`` (and why) and
the engine falls back to the deployed release's recorded metadata — never to a silent
"dockerfile".
"""

from __future__ import annotations

from typing import Any

from shipway.backends import imagemeta
from shipway.backends.protocol import ResolvedImage

INSPECT_TIMEOUT = 5


def _engine() -> Any | None:
    from shipway.backends import dockersdk

    dockersdk.load()  # without its SSH transport unless DOCKER_HOST is ssh:// (~80 ms less)
    import docker
    import docker.errors

    try:
        return docker.from_env(timeout=INSPECT_TIMEOUT)
    except docker.errors.DockerException:
        return None


def inspect(client: Any, ref: str) -> dict[str, Any] | None:
    """The engine's inspect attributes of ``ref``, or None when the engine lacks it."""
    import docker.errors
    import requests.exceptions

    try:
        attrs: dict[str, Any] = client.images.get(ref).attrs
        return attrs
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
        return None


def _insecure(client: Any | None) -> tuple[str, ...]:
    import docker.errors
    import requests.exceptions

    from shipway.backends.registry import insecure_registries

    if client is None:
        return ()
    try:
        return insecure_registries(client.info())
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
        return ()


def resolve(ref: str) -> ResolvedImage:
    """``ref`` with its digest (from the reference itself, else the engine or registry)
    and its kind."""
    from shipway.backends.registry import lookup
    from shipway.errors import RegistryLookupFailed

    digest = ref.split("@", 1)[1] if "@" in ref else None
    client = _engine()
    try:
        attrs = inspect(client, ref) if client is not None else None
        if attrs is not None:
            return ResolvedImage(
                ref=ref,
                digest=digest or imagemeta.repo_digest(attrs, ref),
                meta=imagemeta.classify(attrs),
            )
        try:
            found = lookup(ref, insecure=_insecure(client))
        except RegistryLookupFailed as exc:
            return ResolvedImage(ref=ref, digest=digest, unknown_because=str(exc))
        return ResolvedImage(
            ref=ref, digest=digest or found.digest, meta=imagemeta.classify(found.attrs)
        )
    finally:
        if client is not None:
            client.close()
