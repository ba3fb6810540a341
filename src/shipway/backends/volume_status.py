"""A volume as ``status`` and plans show it, on every backend: where it is, its state, its
size on disk (or a claim's requested size and capacity). Plain values, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def human_bytes(n: int) -> str:
    """Bytes as a user reads them: 0 B, 812 B, 4.0 KiB, 12.3 MiB, 1.5 GiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class VolumeStatus:
    """One volume of a slot as its backend finds it: where it lives, whether it exists,
    its size on disk when the backend can tell (None: it cannot), and for a claim, what
    was asked and what is bound. ``declared`` False: data a release left behind when the
    volume left the spec (kept, like every volume, until ``destroy --volumes``)."""

    name: str
    where: str
    state: str  # "present", "missing" (declared, not made yet), or the engine's phase
    size_bytes: int | None = None
    host: str | None = None
    requested: str | None = None
    capacity: str | None = None
    access_mode: str | None = None
    declared: bool = True

    def line(self) -> str:
        """``data: /state/…/volumes/data, present, 12.3 MiB on disk``."""
        at = f" on {self.host}" if self.host else ""
        parts = [f"{self.where}{at}", self.state]
        if self.requested:
            parts.append(f"requested {self.requested}")
        if self.capacity:
            parts.append(f"capacity {self.capacity}")
        if self.access_mode:
            parts.append(self.access_mode)
        if self.size_bytes is not None:
            parts.append(f"{human_bytes(self.size_bytes)} on disk")
        if not self.declared:
            parts.append("no longer declared (kept: destroy --volumes deletes it)")
        return f"{self.name}: " + ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "where": self.where,
            "state": self.state,
            "size_bytes": self.size_bytes,
            "host": self.host,
            "requested": self.requested,
            "capacity": self.capacity,
            "access_mode": self.access_mode,
            "declared": self.declared,
        }
