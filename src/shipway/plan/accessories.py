"""Pure: the accessories a deploy makes run as declared, against what the slot runs.

An accessory is the slot's: only a deploy plans it, and only when it is missing, down, or
its own declaration changed (then at the cost of a restart, said in the step). A change of
its major version is refused unless the deploy names the accessory in ``upgrade``
(``--upgrade-accessory NAME``): the server's data belongs to its major version, so a
Postgres upgrade is a dump and restore into a new cluster, and a Redis upgrade a snapshot
(as ``shipway backup`` takes it) loaded by the new server in a new data directory, each
with the old data kept until the new server answers (dokku-postgres#264: an upgrade no one
asked for broke a database). A downgrade is refused either way (neither reads the data
of a newer major: Redis 7 refuses a Redis 8 snapshot, "Can't handle RDB format version
12"). An accessory the spec no
longer declares keeps running with its data (a note says so); only ``destroy --volumes``
deletes it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
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


#: the flag that asks for a major-version change (said in the refusal)
UPGRADE_FLAG = "--upgrade-accessory"


def accessory_steps(
    declared: Mapping[str, Accessory],
    seen: Mapping[str, SeenAccessory],
    spec_file: str,
    upgrade: Collection[str] = (),
) -> list[StartAccessory]:
    """The steps that make every declared accessory run as declared; none when each one
    runs as declared. Raises InputError for a major-version change not asked for in
    ``upgrade`` (accessory names), and for an ``upgrade`` name not declared."""
    unknown = sorted(set(upgrade) - set(declared))
    if unknown:
        raise InputError(
            f"{UPGRADE_FLAG} {unknown[0]}: {spec_file} declares no such accessory "
            f"(accessories: {', '.join(declared) or 'none'})"
        )
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
            steps.append(_upgrade(spec_file, accessory, now, name in upgrade, declaration))
            continue
        if now.digest != accessory.digest():
            why = _changed(now.declared, accessory.to_json())
            steps.append(StartAccessory(name, accessory.kind, version, "restart", declaration, why))
        elif not now.running:
            steps.append(StartAccessory(name, accessory.kind, version, "start", declaration))
    return steps


def _upgrade(
    spec_file: str, accessory: Accessory, now: SeenAccessory, asked: bool, declaration: str
) -> StartAccessory:
    """The step of a major-version change asked for, or the InputError that refuses it."""
    key = f"{spec_file}: accessories.{accessory.name}.version"
    old, new = now.version or "", accessory.version or ""
    runs = f"{accessory.kind} {old} runs in this slot with its data, and the spec asks for {new}"
    how = _HOW.get(accessory.kind)
    if how is None:
        raise InputError(
            f"{key}: {runs}: shipway upgrades a postgres or redis accessory only (hint: keep "
            f'version = "{old}", or back it up, destroy the slot with --volumes, deploy and '
            "restore the backup)"
        )
    if int(new) < int(old):
        raise InputError(
            f"{key}: {runs}: a major version is never downgraded ({_NEWER[accessory.kind]}) "
            f'(hint: keep version = "{old}")'
        )
    if not asked:
        raise InputError(
            f"{key}: {runs}: a major-version change is done only when asked for, as "
            f"{how.format(new=new)}, with the {old} data kept until the new server answers "
            f"(hint: {UPGRADE_FLAG} {accessory.name} on plan and deploy; back it up first: "
            f'shipway backup SLOT {accessory.name}; or keep version = "{old}")'
        )
    why = f"{old} -> {new}, asked by {UPGRADE_FLAG} {accessory.name}"
    return StartAccessory(accessory.name, accessory.kind, new, "upgrade", declaration, why)


#: how each kind's major-version change is done (said when it is refused unasked)
_HOW = {
    "postgres": "a dump and restore into a new postgres {new} cluster",
    "redis": "a snapshot (as shipway backup takes it) loaded by a new redis {new} server in a "
    "new data directory",
}
#: why each kind is never downgraded
_NEWER = {
    "postgres": "a newer cluster's data cannot be read by an older server",
    "redis": "an older redis cannot read a newer one's RDB snapshot or append-only file",
}


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
