"""The rendered artifact of a release: what a backend applies, kept so a rollback
re-applies exactly what ran.

A backend's renderer (pure) turns spec + release into units: Kubernetes objects, container
specs on a host, supervised programs and routes. Bodies are JSON data holding secret
placeholders, never secret values.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

PREREQUISITE = 0  # namespaces, secrets, config, snapshots: applied first
WORKLOAD = 1  # processes / Deployments / containers
ROUTING = 2  # routes, ingresses, proxy entries

#: Unit kinds that hold an app's data (a volume directory, a Docker volume, a claim). They
#: belong to the slot, not to a release or a generation: no plan ever removes one
#: (invariant 11); only ``shipway destroy SLOT --volumes`` deletes them.
DATA_KINDS = frozenset({"volume", "PersistentVolumeClaim"})


def digest_of(body: Any) -> str:
    raw = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:20]


@dataclass(frozen=True)
class Unit:
    """One thing a backend can apply and observe, identified by ``key``.

    ``waits``: after applying it, the engine waits for it to become ready (workloads).
    ``switches``: applying it moves traffic or replaces what runs in place; the release
    command (migrations) runs before the first such unit is applied.
    """

    key: str
    kind: str
    body: Mapping[str, Any]
    phase: int = WORKLOAD
    process: str | None = None
    host: str | None = None
    generation: str | None = None
    waits: bool = False
    switches: bool = False
    digest: str = field(default="")

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", digest_of(self.body))

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kind": self.kind,
            "phase": self.phase,
            "process": self.process,
            "host": self.host,
            "generation": self.generation,
            "waits": self.waits,
            "switches": self.switches,
            "digest": self.digest,
            "body": self.body,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Unit:
        return cls(
            key=data["key"],
            kind=data["kind"],
            body=data["body"],
            phase=data.get("phase", WORKLOAD),
            process=data.get("process"),
            host=data.get("host"),
            generation=data.get("generation"),
            waits=data.get("waits", False),
            switches=data.get("switches", False),
            digest=data.get("digest", ""),
        )


@dataclass(frozen=True)
class Artifact:
    units: tuple[Unit, ...] = ()

    def __post_init__(self) -> None:
        keys = [u.key for u in self.units]
        dupes = {k for k in keys if keys.count(k) > 1}
        if dupes:
            raise ValueError(f"duplicate unit keys in artifact: {sorted(dupes)}")

    def __iter__(self) -> Iterator[Unit]:
        return iter(self.units)

    def __len__(self) -> int:
        return len(self.units)

    def get(self, key: str) -> Unit:
        for unit in self.units:
            if unit.key == key:
                return unit
        raise KeyError(key)

    def keys(self) -> list[str]:
        return [u.key for u in self.units]

    def to_json(self) -> list[dict[str, Any]]:
        return [u.to_json() for u in self.units]

    @classmethod
    def from_json(cls, data: list[Mapping[str, Any]]) -> Artifact:
        return cls(tuple(Unit.from_json(u) for u in data))
