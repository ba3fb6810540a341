"""An image's digest and configuration read from the registry its reference names — without
pulling it (the OCI distribution API: a manifest, then the config blob it points at).

Why: a new Docker host (or a cluster) has never pulled the image, and a deploy must still
know what kind of image it is (invariant 5) and which digest to pin. The engines can tell a
digest (``/distribution/{name}/json``) but not the image's labels, environment or working
directory: only the config blob has them.

Two GETs (three with a bearer token) are all it takes:

* ``GET /v2/<repository>/manifests/<tag or digest>`` with ``Accept`` for the OCI index and
  manifest and Docker's v2 list and manifest; an index (or list) names one manifest per
  platform, and the one for this machine's platform (linux/amd64 …) is fetched next;
* ``GET /v2/<repository>/blobs/<config digest>``: a JSON whose ``config`` holds ``Labels``,
  ``Env``, ``WorkingDir``, ``ExposedPorts``, ``Cmd``, ``Entrypoint``.

Credentials are the user's: the Docker SDK's own resolution of ``~/.docker/config.json``
(``DOCKER_CONFIG``, ``auths``, ``credsStore``, ``credHelpers``), answered to a ``Basic`` or
``Bearer`` challenge. A registry is reached over HTTPS; over plain HTTP only when it is
insecure by the rules of the Docker engine in charge (its ``insecure-registries``), or a
loopback address, as Docker itself does.

The ORAS Python SDK (oras 0.2.43) was tried for this and not taken: its requests carry no
timeout and it retries a refused connection five times with sleeps of 3 to 83 s, so an
unreachable registry would hang a ``plan`` for minutes. Every request here has a timeout,
and a failure is said in one line (:class:`RegistryLookupFailed`) for the caller's fallback.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import platform
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shipway.backends.imagemeta import ImageRef
from shipway.errors import RegistryLookupFailed

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
INDEXES = (OCI_INDEX, DOCKER_LIST)
TIMEOUT = 5.0
MAX_DOCUMENT = 4 * 1024 * 1024  # a manifest or config larger than this is not an image's


@dataclass(frozen=True)
class RegistryImage:
    """What the registry says of an image: the manifest digest to pin, and inspect-shaped
    attributes (``Config``, ``RepoDigests``) that :mod:`shipway.backends.imagemeta` reads."""

    ref: str
    digest: str
    attrs: Mapping[str, Any] = field(default_factory=dict)


def insecure_registries(info: Mapping[str, Any]) -> tuple[str, ...]:
    """The registries a Docker engine reaches over plain HTTP, from its ``/info``
    (``RegistryConfig.IndexConfigs[*].Secure`` false, and ``InsecureRegistryCIDRs``)."""
    config = info.get("RegistryConfig") or {}
    names = [
        name
        for name, index in (config.get("IndexConfigs") or {}).items()
        if isinstance(index, Mapping) and index.get("Secure") is False
    ]
    cidrs = [c for c in config.get("InsecureRegistryCIDRs") or [] if isinstance(c, str)]
    return (*names, *(f"cidr:{c}" for c in cidrs))


def _is_insecure(registry: str, insecure: Iterable[str]) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    rules = list(insecure)
    if registry in rules or host in ("localhost",):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if address.is_loopback:
        return True
    for rule in rules:
        if rule.startswith("cidr:"):
            try:
                if address in ipaddress.ip_network(rule[5:], strict=False):
                    return True
            except ValueError:
                continue
    return False


def _platform() -> tuple[str, str]:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm"}.get(machine, machine)
    return "linux", arch


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, params = header.strip().partition(" ")
    found = dict(re.findall(r'(\w+)="([^"]*)"', params))
    return scheme.lower(), found


class _Client:
    """One registry, one session: the scheme decided once, a token kept for the session."""

    def __init__(self, image: ImageRef, insecure: Iterable[str], timeout: float) -> None:
        import requests

        self.image = image
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["User-Agent"] = "shipway"
        self.schemes = ["https", "http"] if _is_insecure(image.registry, insecure) else ["https"]
        self.auth_header: str | None = None

    def close(self) -> None:
        self.session.close()

    def _credentials(self) -> tuple[str, str] | None:
        import docker.auth

        try:
            config = docker.auth.load_config()
            found = docker.auth.resolve_authconfig(config, self.image.registry)
        except Exception:  # an unreadable config or a broken helper: anonymous
            return None
        if not found:
            return None
        user, secret = found.get("username") or found.get("Username"), found.get("password")
        if secret is None:
            secret = found.get("Password") or found.get("identitytoken")
        return (str(user or ""), str(secret)) if secret else None

    def _authorise(self, response: Any) -> bool:
        """Answer a 401's challenge once: Basic with the user's credentials, or a Bearer
        token from the realm it names."""
        import base64

        scheme, params = _challenge(response.headers.get("WWW-Authenticate", ""))
        creds = self._credentials()
        if scheme == "basic":
            if creds is None:
                return False
            raw = f"{creds[0]}:{creds[1]}".encode()
            self.auth_header = "Basic " + base64.b64encode(raw).decode()
            return True
        if scheme != "bearer" or "realm" not in params:
            return False
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        answer = self.session.get(params["realm"], params=query, auth=creds, timeout=self.timeout)
        if answer.status_code != 200:
            return False
        body = answer.json()
        token = body.get("token") or body.get("access_token")
        if not token:
            return False
        self.auth_header = f"Bearer {token}"
        return True

    def get(self, path: str, accept: str | None = None) -> Any:
        import requests

        headers = {"Accept": accept} if accept else {}
        last: Exception | None = None
        for scheme in list(self.schemes):
            url = f"{scheme}://{self.image.api_host}/v2/{self.image.repository}/{path}"
            try:
                response = self._send(url, headers)
            except requests.exceptions.RequestException as exc:
                last = exc
                continue
            self.schemes = [scheme]  # the scheme that answered is the registry's
            return response
        raise RegistryLookupFailed(f"registry {self.image.registry} did not answer: {last}")

    def _send(self, url: str, headers: dict[str, str]) -> Any:
        def send() -> Any:
            auth = {"Authorization": self.auth_header} if self.auth_header else {}
            return self.session.get(
                url, headers={**headers, **auth}, timeout=self.timeout, stream=True
            )

        response = send()
        if response.status_code == 401 and self._authorise(response):
            response.close()
            response = send()
        return response


def _document(client: _Client, path: str, what: str, accept: str | None = None) -> Any:
    response = client.get(path, accept)
    try:
        if response.status_code != 200:
            raise RegistryLookupFailed(
                f"registry {client.image.registry}: {what} of {client.image.repository}: "
                f"HTTP {response.status_code} {_errors(response)}".rstrip()
            )
        body = response.raw.read(MAX_DOCUMENT + 1, decode_content=True)
    finally:
        response.close()
    if len(body) > MAX_DOCUMENT:
        raise RegistryLookupFailed(f"registry {client.image.registry}: {what} is too large")
    return response, body


def _errors(response: Any) -> str:
    try:
        data = json.loads(response.raw.read(64 * 1024, decode_content=True))
        return "; ".join(
            f"{e.get('code', '')}: {e.get('message', '')}" for e in data.get("errors", [])
        )
    except Exception:
        return ""


def _pick_platform(index: Mapping[str, Any]) -> str | None:
    os_name, arch = _platform()
    manifests = [m for m in index.get("manifests") or [] if isinstance(m, Mapping)]
    for entry in manifests:
        plat = entry.get("platform") or {}
        if plat.get("os") == os_name and plat.get("architecture") == arch:
            return str(entry["digest"])
    return None


def lookup(ref: str, *, insecure: Iterable[str] = (), timeout: float = TIMEOUT) -> RegistryImage:
    """Digest and config of ``ref`` from its registry. Raises RegistryLookupFailed."""
    try:
        image = ImageRef.parse(ref)
    except ValueError as exc:
        raise RegistryLookupFailed(str(exc)) from exc
    client = _Client(image, insecure, timeout)
    try:
        response, body = _document(client, f"manifests/{image.reference}", "manifest", ACCEPT)
        digest = response.headers.get("Docker-Content-Digest") or (
            "sha256:" + hashlib.sha256(body).hexdigest()
        )
        manifest = _json(body, image, "manifest")
        if manifest.get("mediaType") in INDEXES or "manifests" in manifest:
            chosen = _pick_platform(manifest)
            if chosen is None:
                os_name, arch = _platform()
                raise RegistryLookupFailed(
                    f"registry {image.registry}: {image.repository} has no {os_name}/{arch} image"
                )
            _, body = _document(client, f"manifests/{chosen}", "platform manifest", ACCEPT)
            manifest = _json(body, image, "platform manifest")
        config_digest = (manifest.get("config") or {}).get("digest")
        if not isinstance(config_digest, str):
            raise RegistryLookupFailed(
                f"registry {image.registry}: the manifest of {image.repository} names no config"
            )
        _, body = _document(client, f"blobs/{config_digest}", "config blob")
        config = _json(body, image, "config blob")
    finally:
        client.close()
    attrs = {
        "Id": config_digest,
        "Config": config.get("config") or {},
        "RepoDigests": [f"{image.name}@{digest}"],
    }
    return RegistryImage(ref=ref, digest=digest, attrs=attrs)


def _json(body: bytes, image: ImageRef, what: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise RegistryLookupFailed(
            f"registry {image.registry}: the {what} of {image.repository} is not JSON"
        ) from exc
    if not isinstance(data, dict):
        raise RegistryLookupFailed(
            f"registry {image.registry}: the {what} of {image.repository} is not an object"
        )
    return data
