"""API discovery: which resource of the API server serves an ``apiVersion`` and ``kind``,
its plural, and whether it is namespaced — for any kind the cluster knows, custom ones
included, so a manifests source is not limited to the kinds shipway renders itself.

One GET per group-version a source uses (``/api/v1``, ``/apis/apps/v1``, …), cached for the
backend's life; a CustomResourceDefinition in the same set declares its kind before the
server serves it (the plan is made before the CRD exists), and applying a CRD forgets what
was cached of its group-version, so its custom resources are found once it is Established.

Objects travel as plain dicts through lightkube resource classes made here (never the
typed models, which drop fields they do not know and refuse objects they cannot
validate): what a manifest says is what is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.core.generic_client import GenericClient
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericNamespacedResource,
    create_api_info,
)

_CLASSES: dict[tuple[str, str, str, str, bool], type[Any]] = {}


@dataclass(frozen=True)
class ServedKind:
    """A kind as the API server serves it."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> type[Any]:
        """A lightkube resource class for it whose objects are plain dicts."""
        key = (self.group, self.version, self.kind, self.plural, self.namespaced)
        found = _CLASSES.get(key)
        if found is None:
            base = GenericNamespacedResource if self.namespaced else GenericGlobalResource
            info = create_api_info(self.group, self.version, self.kind, self.plural)
            found = type(self.kind, (base,), {"_api_info": info})
            _CLASSES[key] = found
        return found


def path_of(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


class Discovery:
    """What the cluster serves, asked once per group-version."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._served: dict[str, dict[str, ServedKind] | None] = {}
        self._declared: dict[tuple[str, str], ServedKind] = {}

    def find(self, api_version: str, kind: str) -> ServedKind | None:
        """The kind, or None when the server does not serve it (nor a CRD of the set
        declares it). Raises ApiError when the server refuses to say."""
        declared = self._declared.get((api_version, kind))
        if api_version not in self._served:
            self._served[api_version] = self._ask(api_version)
        served = self._served[api_version]
        found = served.get(kind) if served is not None else None
        return found or declared

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the server itself serves the kind now (not only a CRD of the set)."""
        self.find(api_version, kind)
        served = self._served.get(api_version)
        return served is not None and kind in served

    def _ask(self, api_version: str) -> dict[str, ServedKind] | None:
        lightkube_client = getattr(self._client, "unwrapped", self._client)  # under retries
        http = lightkube_client._client._client  # its HTTP client (auth, TLS, base URL)
        response = http.get(path_of(api_version))
        if response.status_code == 404:
            return None
        raise_for_status: Any = GenericClient.raise_for_status  # ApiError, as lightkube's own
        raise_for_status(response)
        group, _, version = api_version.rpartition("/")
        out: dict[str, ServedKind] = {}
        for res in response.json().get("resources") or []:
            if "/" in str(res.get("name", "")):  # a subresource: deployments/scale
                continue
            kind = str(res.get("kind", ""))
            out.setdefault(
                kind,
                ServedKind(group, version, kind, str(res["name"]), bool(res.get("namespaced"))),
            )
        return out

    def declare_crd(self, crd: Mapping[str, Any]) -> None:
        """The kinds a CustomResourceDefinition of the set will serve (every version it
        serves), before the server knows them."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group, kind, plural = spec.get("group"), names.get("kind"), names.get("plural")
        if not (group and kind and plural):
            return
        namespaced = spec.get("scope", "Namespaced") == "Namespaced"
        for version in spec.get("versions") or []:
            if version.get("served", True) and version.get("name"):
                served = ServedKind(group, str(version["name"]), kind, plural, namespaced)
                self._declared[(served.api_version, kind)] = served

    def forget(self, crd: Mapping[str, Any]) -> None:
        """After a CRD is applied: ask again about the group-versions it serves."""
        spec = crd.get("spec") or {}
        for version in spec.get("versions") or []:
            self._served.pop(f"{spec.get('group')}/{version.get('name')}", None)


def not_found(exc: ApiError) -> bool:
    return exc.status.code == 404
