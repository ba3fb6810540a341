"""Pure: the accessories a deploy makes run as declared, against what the slot runs.

An accessory is the slot's: only a deploy plans it, and only when it is missing, down, or
its own declaration changed (then at the cost of a restart, said in the step). A change of
its major version is refused: the server's data belongs to its major version, and the
dump-and-restore upgrade is not done yet. An accessory the spec no longer declares keeps
running with its data (a note says so); only ``destroy --volumes`` deletes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shipway.errors import InputError
from shipway.plan.model import StartAccessory
from shipway.spec.accessories import Accessory


@dataclass(frozen=True)
class SeenAccessory:
    """An accessory as the backend found it in the slot."""

    name: str
    kind: str
    version: str | None
    digest: str | None
    running: bool
    #: its declaration as recorded when it was last started (``Accessory.to_json``)
    declared: Mapping[str, Any] = field(default_factory=dict)

    def signature(self) -> str:
        return f"{self.digest}:{'running' if self.running else 'stopped'}"


def summary(seen: Mapping[str, SeenAccessory]) -> dict[str, str]:
    """What a saved plan checks again: each accessory's declaration and state."""
    return {f"accessory/{name}": s.signature() for name, s in sorted(seen.items())}


def accessory_steps(
    declared: Mapping[str, Accessory], seen: Mapping[str, SeenAccessory], spec_file: str
) -> list[StartAccessory]:
    """The steps that make every declared accessory run as declared; none when each one
    runs as declared. Raises InputError for a major-version change."""
    steps = []
    for name, accessory in declared.items():
        now = seen.get(name)
        declaration = json.dumps(accessory.to_json(), sort_keys=True)
        version = accessory.version or ""
        if now is None:
            steps.append(StartAccessory(name, accessory.kind, version, "create", declaration))
            continue
        if now.kind != accessory.kind:
            raise InputError(
                f"{spec_file}: accessories.{name}.kind: a {now.kind} server runs as {name} in "
                f"this slot with its data, and the spec asks for {accessory.kind} (hint: give "
                f"the new one another name, or destroy the slot with --volumes first)"
            )
        if now.version and accessory.version and now.version != accessory.version:
            raise InputError(
                f"{spec_file}: accessories.{name}.version: {accessory.kind} {now.version} "
                f"runs in this slot with its data, and the spec asks for {accessory.version}: "
                "a major-version change needs a dump and restore, which shipway does not do "
                f'yet (hint: keep version = "{now.version}"; to move by hand, dump the data, '
                "destroy the slot with --volumes, deploy, and restore the dump)"
            )
        if now.digest != accessory.digest():
            why = _changed(now.declared, accessory.to_json())
            steps.append(StartAccessory(name, accessory.kind, version, "restart", declaration, why))
        elif not now.running:
            steps.append(StartAccessory(name, accessory.kind, version, "start", declaration))
    return steps


def undeclared_notes(
    declared: Mapping[str, Accessory], seen: Mapping[str, SeenAccessory]
) -> list[str]:
    return [
        f"accessory {name} is no longer declared: it keeps running with its data "
        "(shipway destroy SLOT --volumes deletes it)"
        for name in sorted(set(seen) - set(declared))
    ]


def _changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """``key: old -> new`` for each key of the declaration that changed."""
    keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return ", ".join(f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in keys) or "unknown"
