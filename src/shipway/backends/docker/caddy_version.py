"""Which Caddy a proxy image holds, read from the image's own metadata. PURE.

shipway's shared proxy needs Caddy 2.8 or later (docs/docker.md, "What shipway relies on
in Caddy"): an older one loads a route whose upstream is read from a file and sends its
requests nowhere. The official image says its version twice — ``ENV CADDY_VERSION
v2.10.2`` and the label ``org.opencontainers.image.version`` — so the version is known
from an inspection the deploy makes anyway (the image is looked up before anything old
goes), without running the image. An image that says neither (one built another way) is
taken as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: the oldest Caddy the shared proxy works with
MINIMUM = (2, 8)
ENV = "CADDY_VERSION"
LABEL = "org.opencontainers.image.version"

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def declared(attrs: Mapping[str, Any]) -> str | None:
    """The Caddy version an image's inspection declares (``v2.10.2``), or None."""
    config = attrs.get("Config") or {}
    for entry in config.get("Env") or []:
        name, _, value = str(entry).partition("=")
        if name == ENV and value:
            return value
    labels = config.get("Labels") or {}
    if str(labels.get("org.opencontainers.image.title", "")).lower() == "caddy":
        label = labels.get(LABEL)
        return str(label) if label else None
    return None


def too_old(attrs: Mapping[str, Any]) -> str | None:
    """The declared version when it is older than :data:`MINIMUM`, else None (also when
    the image declares none, or one that is not a version number)."""
    version = declared(attrs)
    found = _VERSION.match(version or "")
    if version is None or found is None:
        return None
    if (int(found.group(1)), int(found.group(2))) < MINIMUM:
        return version
    return None


def refusal(image: str, version: str) -> str:
    """What a deploy says when ``image`` holds a Caddy older than :data:`MINIMUM`."""
    need = ".".join(str(n) for n in MINIMUM)
    return (
        f"the proxy image {image} holds Caddy {version}; shipway's shared proxy needs Caddy "
        f"{need} or later (a route's upstream is read from a file, which older versions "
        f'send nowhere) (hint: use proxy_image = "caddy:2", or a Caddy {need}+ image)'
    )
