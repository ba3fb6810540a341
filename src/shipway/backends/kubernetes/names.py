"""PURE: the names of objects, as the API server accepts them."""

from __future__ import annotations

import hashlib
import re


def dns_name(*parts: str, limit: int = 63) -> str:
    """A DNS label from parts; shortened with a stable hash suffix when too long."""
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    if len(name) <= limit:
        return name
    suffix = hashlib.sha256(name.encode()).hexdigest()[:8]
    return name[: limit - 9].rstrip("-") + "-" + suffix
