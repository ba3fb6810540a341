"""Accessories: backing services beside the app (a database, a cache) — ``[accessories.NAME]``.

::

    [accessories.db]
    kind = "postgres"        # postgres | redis (or command/image with port: not run yet)
    version = "15"           # the server's major version: required, pinned
    # host = "ssh://…"       # docker slots only: the one host it runs on
    # size = "10Gi"          # kubernetes slots only: its claim
    [secrets]
    DATABASE_URL = { from_accessory = "db" }

An accessory is the slot's, not a release's: an app's deploy, rollback, restart or switch
never restarts or replaces it (invariant 16); a change to its own declaration is planned
with its cost; its data outlives every release; a major-version change is refused. Its
credentials are made once, in the target, and reach the app only through a secret that
names it (``from_accessory``): never written in the spec, never shown.

Which backends run which kinds is :data:`SUPPORTED`; a slot on another backend is refused
here, when the spec is read, with the fix. What this machine can run (is Postgres 15
installed?) is the backend's to say, when a plan is made.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from shipway.spec.check import Checker
from shipway.spec.locate import KeyPath

if TYPE_CHECKING:
    from shipway.spec.model import Slot
    from shipway.spec.secrets import SecretRef

AccessoryKind = Literal["postgres", "redis", "custom"]
KINDS: tuple[str, ...] = ("postgres", "redis")
ACCESSORY_KEYS = ("kind", "version", "image", "command", "port", "health_command", "host", "size")
#: the major versions shipway knows how to run, by kind (the backend says which of them
#: this machine has)
KNOWN_VERSIONS: dict[str, tuple[str, ...]] = {
    "postgres": ("12", "13", "14", "15", "16", "17"),
    "redis": ("6", "7", "8"),
}
#: the backends that run each kind this version; the others come in later ones
SUPPORTED: dict[str, tuple[str, ...]] = {
    "postgres": ("local", "docker", "kubernetes"),
    "redis": ("local", "docker", "kubernetes"),
    "custom": (),
}
#: keys that apply to one backend only
BACKEND_KEYS = {"host": "docker", "size": "kubernetes"}
#: the environment variable the link is usually given as, by kind (for hints)
LINK_NAMES = {"postgres": "DATABASE_URL", "redis": "REDIS_URL"}

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
_VERSION = re.compile(r"^[0-9]{1,3}$")
_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?(k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")


@dataclass(frozen=True)
class Accessory:
    """One backing service of the app in its slots."""

    name: str
    kind: AccessoryKind
    version: str | None = None
    image: str | None = None
    command: tuple[str, ...] | None = None
    port: int | None = None
    health_command: tuple[str, ...] | None = None
    host: str | None = None
    size: str | None = None

    @property
    def major(self) -> str | None:
        return self.version

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.kind != "custom":
            out["kind"] = self.kind
        for key in ("version", "image", "port", "host", "size"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.command is not None:
            out["command"] = list(self.command)
        if self.health_command is not None:
            out["health_command"] = list(self.health_command)
        return out

    def digest(self) -> str:
        """What the declaration says, hashed: a change of it restarts the accessory."""
        raw = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(raw).hexdigest()[:16]

    def describe(self) -> str:
        if self.kind == "custom":
            return f"{self.name} ({' '.join(self.command or ()) or self.image})"
        return f"{self.name} ({self.kind} {self.version})"


def from_json(name: str, data: Mapping[str, Any]) -> Accessory:
    """An accessory from its :meth:`Accessory.to_json` form (a plan's step carries it)."""
    command = data.get("command")
    health = data.get("health_command")
    return Accessory(
        name=name,
        kind=data.get("kind", "custom"),
        version=data.get("version"),
        image=data.get("image"),
        command=tuple(command) if command is not None else None,
        port=data.get("port"),
        health_command=tuple(health) if health is not None else None,
        host=data.get("host"),
        size=data.get("size"),
    )


def parse_accessories(c: Checker, raw: Any, slots: Mapping[str, Slot]) -> dict[str, Accessory]:
    """The ``[accessories]`` table; every slot's backend must run each one."""
    table = c.table(raw, ("accessories",)) or {}
    out: dict[str, Accessory] = {}
    for name, araw in table.items():
        path: KeyPath = ("accessories", name)
        if not _NAME.match(str(name)):
            c.error(
                path,
                f"{name!r} is not a valid accessory name",
                "lowercase letters, digits and '-', at most 32 characters (e.g. db)",
            )
            continue
        a = c.table(araw, path, ACCESSORY_KEYS)
        if a is None:
            continue
        accessory = _accessory(c, name, a, path, slots)
        if accessory is not None:
            out[name] = accessory
    return out


def _accessory(
    c: Checker, name: str, a: Mapping[str, Any], path: KeyPath, slots: Mapping[str, Slot]
) -> Accessory | None:
    custom = [k for k in ("image", "command") if k in a]
    if "kind" in a and custom:
        c.error((*path, custom[0]), f"is not allowed with kind ({a.get('kind')!r})", (
            f"a {a.get('kind')} accessory runs the server shipway knows; remove {custom[0]}, "
            "or remove kind to run your own"
        ))  # fmt: skip
        return None
    if "kind" not in a and not custom:
        c.error(path, "needs a kind", 'e.g. kind = "postgres" (or "redis")')
        return None
    kind: AccessoryKind = "custom"
    version = None
    if "kind" in a:
        chosen = c.choice(a["kind"], (*path, "kind"), KINDS)
        if chosen is None:
            return None
        kind = "postgres" if chosen == "postgres" else "redis"
        version = _version(c, a, path, kind)
    elif "version" in a:
        version = _version(c, a, path, kind)
    command = c.command(a["command"], (*path, "command")) if "command" in a else None
    image = c.string(a["image"], (*path, "image")) if "image" in a else None
    port = c.integer(a["port"], (*path, "port"), "port") if "port" in a else None
    if kind == "custom" and "port" not in a:
        c.error((*path, "port"), "is required for an accessory of your own", "e.g. port = 6379")
    elif kind != "custom" and "port" in a:
        c.error((*path, "port"), f"is chosen by shipway for a {kind} accessory", "remove it")
    health = (
        c.command(a["health_command"], (*path, "health_command")) if "health_command" in a else None
    )
    if health is not None and kind != "custom":
        c.error((*path, "health_command"), f"a {kind} accessory has its own", "remove it")
    host = c.string(a["host"], (*path, "host")) if "host" in a else None
    size = (
        c.string(a["size"], (*path, "size"), pattern=_SIZE, what="size", hint='e.g. size = "10Gi"')
        if "size" in a
        else None
    )
    _check_backends(c, name, a, path, kind, slots)
    return Accessory(name, kind, version, image, command, port, health, host, size)


def _version(c: Checker, a: Mapping[str, Any], path: KeyPath, kind: AccessoryKind) -> str | None:
    """A major version, required: a server's data is tied to its major version, so an
    unpinned one could upgrade it under the team's feet (dokku-postgres#264)."""
    known = KNOWN_VERSIONS.get(kind, ())
    example = known[-1] if known else "1"
    if "version" not in a:
        if kind != "custom":
            c.error(
                (*path, "version"),
                f"is required: a {kind} accessory's major version is pinned",
                f'e.g. version = "{example}" (known: {", ".join(known)})',
            )
        return None
    raw = a["version"]
    value = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else raw
    version = c.string(
        value,
        (*path, "version"),
        pattern=_VERSION,
        what="major version",
        hint=f'the major version only, e.g. version = "{example}"',
    )
    if version is not None and known and version not in known:
        c.error(
            (*path, "version"),
            f"{kind} {version} is not a version shipway runs",
            f"use one of: {', '.join(known)}",
        )
        return None
    return version


def _check_backends(
    c: Checker,
    name: str,
    a: Mapping[str, Any],
    path: KeyPath,
    kind: AccessoryKind,
    slots: Mapping[str, Slot],
) -> None:
    """Keys that apply to a backend no slot uses, and slots whose backend cannot run it."""
    backends = {s.backend for s in slots.values()}
    for key, backend in BACKEND_KEYS.items():
        if key in a and backend not in backends:
            c.error(
                (*path, key),
                f"applies to {backend} slots only, and no slot of this spec is one",
                f"remove {key} (the slots: {_slots_text(slots)})",
            )
    runs = SUPPORTED[kind]
    what = "an accessory of your own (command or image)" if kind == "custom" else f"a {kind}"
    for slot in slots.values():
        if slot.backend not in runs:
            plural = "s" if len(runs) > 1 else ""
            where = f"the {' and '.join(runs)} backend{plural} only" if runs else "no backend yet"
            c.error(
                ("slots", slot.name, "backend"),
                f"slot {slot.name} is a {slot.backend} slot, and {what} accessory "
                f"({name}) runs on {where} in this version of shipway",
                f"deploy [accessories.{name}] to a local slot, or run it yourself and "
                "give the app its address as a secret (from_env)",
            )


def _slots_text(slots: Mapping[str, Slot]) -> str:
    return ", ".join(f"{s.name} ({s.backend})" for s in slots.values()) or "(none)"


def check_links(
    c: Checker, secrets: Mapping[str, SecretRef], accessories: Mapping[str, Accessory]
) -> None:
    """Every ``from_accessory`` names a declared accessory that has a link to give."""
    for name, ref in secrets.items():
        if ref.from_accessory is None:
            continue
        path: KeyPath = ("secrets", name, "from_accessory")
        found = accessories.get(ref.from_accessory)
        if found is None:
            declared = ", ".join(accessories) or "none"
            c.error(
                path,
                f"names accessory {ref.from_accessory!r}, which is not declared "
                f"(accessories: {declared})",
                f"declare [accessories.{ref.from_accessory}] or fix the name",
            )
        elif found.kind == "custom":
            c.error(
                path,
                f"accessory {found.name} is one of your own: shipway makes no credentials "
                "for it, so it has no link to give",
                "give the app its address in [env], or a secret from_env",
            )
