"""What differs between what runs and what would run, as plain data.

A :class:`Change` is one difference of one unit (the app as a whole, a process, a route, a
config file, an object in the target): the field, the kind of change, the old and new
values, and whether they are masked. A :class:`Diff` is every change between two releases
(or between the deployed release and a plan), with the revisions it compares.

What must never happen: a secret's value, or a hash of it that could be matched, in a
change. A masked change names the key and says it changed; its ``old`` and ``new`` are
None and its ``lines`` are empty, in every form (``describe``, ``summary``, JSON).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ChangeKind = Literal["added", "removed", "changed", "drifted"]
CHANGE_KINDS: tuple[ChangeKind, ...] = ("added", "removed", "changed", "drifted")

#: the unit of changes that concern the whole app (image, env, secrets, release command)
APP = "app"
#: the unit of the slot's own settings that shape what runs (hosts, namespace, ports)
SLOT = "slot"

#: fields whose change is a whole thing coming or going (a process, a route, a file)
WHOLE = ("process", "route", "content")
#: fields whose values are names, shown unquoted (``image reg/shop:1@1a2b… → …``)
BARE = ("image", "source", "image type", "working dir", "dependencies")
SIGN: dict[ChangeKind, str] = {"added": "+", "removed": "-", "changed": "~", "drifted": "!"}
#: a slot where nothing of the deployed release runs and all else is in place (a stop)
NOT_RUNNING = "not-running"
#: how a drifted unit's live state (``old``) reads
DRIFT = {
    "missing": "missing from the target",
    "altered": "changed in the target since it was applied",
    "undeclared": "in the target, but not in the deployed release",
    "stopped": "stopped",
    "created": "created, never started",
}

_DIGEST = re.compile(r"sha256:([0-9a-f]{12})[0-9a-f]{52}")
#: summary tokens gathered into one (``env +FEATURE_X ~GREETING``, ``drift in 2 units``)
GROUPED = ("env", "drift")


def short(text: str) -> str:
    """Every ``sha256:<64 hex>`` in ``text`` shortened to its first 12 hex digits."""
    return _DIGEST.sub(lambda m: m.group(1), text)


def shown(value: Any) -> str:
    """A value as a diff line shows it: strings quoted, lists as their words, digests short."""
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return short(repr(value) if value == "" or value != value.strip() else f'"{value}"')
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return '"' + " ".join(str(v) for v in value) + '"'
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k} {shown(v)}" for k, v in value.items())
        return f"({inner})" if inner else "()"
    return str(value)


def _bare(value: Any) -> str:
    """A value in a summary token: no quotes, digests short."""
    if isinstance(value, str):
        return short(value)
    return shown(value)


@dataclass(frozen=True)
class Change:
    """One difference. ``unit``: ``app``, ``slot``, a process name, ``route <host>``,
    ``file <path>``, or an object key (drift, object diffs). ``field``: what differs
    (``image``, ``env.NAME``, ``replicas``, ``healthcheck.path``, ``content`` …).
    ``lines``: a unified diff (config files, objects) when there is one to show."""

    unit: str
    field: str
    kind: ChangeKind
    old: Any = None
    new: Any = None
    masked: bool = False
    lines: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in CHANGE_KINDS:
            raise ValueError(f"unknown change kind {self.kind!r}")
        if self.masked and (self.old is not None or self.new is not None or self.lines):
            raise ValueError(f"a masked change carries no values ({self.unit} {self.field})")

    # -- text ----------------------------------------------------------------------

    def _name(self) -> str:
        """The field as a line names it: ``env GREETING``, ``secret TOKEN``, ``replicas``."""
        word, _, key = self.field.partition(".")
        if key and word in ("env", "secrets"):
            return f"env {key}" if word == "env" else f"secret {key} from"
        return self.field

    def headline(self) -> str:
        name, kind = self._name(), self.kind
        if self.field == "live" and self.old == NOT_RUNNING:
            return (
                f"{self.unit}: stopped: nothing of the deployed release runs (shipway stop, "
                "or this machine restarted); this starts it again"
            )
        if self.field == "live":
            return f"{self.unit}: drifted: {DRIFT.get(str(self.old), str(self.old))}"
        if self.masked:
            if self.field == "content":
                return f"{self.unit}: secret-bearing, {kind} (not shown)"
            return f"{self.unit}: {name} (secret) {kind}"
        if self.field == "content":
            return f"{self.unit}: {kind}"
        if self.field in WHOLE:
            if kind == "added":
                return f"{self.unit}: new {self.field} {shown(self.new)}".rstrip()
            was = shown(self.old)
            return f"{self.unit}: {self.field} removed (was {was[1:-1] if was[0] == '(' else was})"
        show = _bare if self.field in BARE or self.field.startswith("secrets.") else shown
        if kind == "added":
            return f"{self.unit}: {name} added: {show(self.new)}"
        if kind == "removed":
            return f"{self.unit}: {name} removed (was {show(self.old)})"
        return f"{self.unit}: {name} {show(self.old)} → {show(self.new)}"

    def describe(self) -> list[str]:
        return [self.headline(), *(f"    {line}" for line in self.lines)]

    def token(self) -> str:
        """This change as a summary token: ``env +FEATURE_X``, ``web replicas 2→3``,
        ``image 1a2b3c4d5e6f→3c4d5e6f7a8b``."""
        sign = SIGN[self.kind]
        word, _, key = self.field.partition(".")
        if self.field == "live":
            return f"drift {self.unit}"
        if key and word in ("env", "secrets"):
            return f"{'env' if word == 'env' else 'secret'} {sign}{key}"
        if self.field == "process":
            return f"process {sign}{self.unit}"
        if self.field in WHOLE:  # "route <host>", "file <path>"
            what, _, which = self.unit.partition(" ")
            return f"{what} {sign}{which}"
        where = "" if self.unit == APP else f"{self.unit} "
        old, new = self.old, self.new
        if self.field in ("image", "source") and isinstance(old, str) and isinstance(new, str):
            old, new = short(old), short(new)
            if "@" in old and "@" in new and old.split("@")[0] == new.split("@")[0]:
                old, new = old.split("@", 1)[1], new.split("@", 1)[1]  # the digests say it
            return f"{self.field} {old}→{new}"  # what runs: always said, however long
        if self.kind == "changed" and _scalar(old) and _scalar(new):
            return f"{where}{self.field} {_bare(old)}→{_bare(new)}"
        return f"{where}{sign}{self.field}"

    # -- JSON ----------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "field": self.field,
            "kind": self.kind,
            "old": self.old,
            "new": self.new,
            "masked": self.masked,
            "lines": list(self.lines),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Change:
        return cls(
            unit=str(data["unit"]),
            field=str(data["field"]),
            kind=data["kind"],
            old=data.get("old"),
            new=data.get("new"),
            masked=bool(data.get("masked", False)),
            lines=tuple(data.get("lines") or ()),
        )


def _scalar(value: Any) -> bool:
    return (
        isinstance(value, str | int | float)
        and not isinstance(value, bool)
        and (not isinstance(value, str) or (len(short(value)) <= 40 and "\n" not in value))
    )


@dataclass(frozen=True)
class Diff:
    """Every change between ``before`` (a revision; None: nothing ran before) and
    ``after`` (a revision; None: what a deploy would run now)."""

    before: int | None
    after: int | None
    changes: tuple[Change, ...] = ()

    @property
    def first(self) -> bool:
        """Nothing ran before: everything is new."""
        return self.before is None

    @property
    def empty(self) -> bool:
        """Nothing differs ("no changes")."""
        return self.before is not None and not self.changes

    def _names(self) -> tuple[str, str]:
        a = "nothing" if self.before is None else f"r{self.before}"
        b = "the plan" if self.after is None else f"r{self.after}"
        return a, b

    def describe(self) -> list[str]:
        a, b = self._names()
        if self.first:
            before = "in this slot" if self.after is None else f"is recorded before {b}"
            return [f"changes: all new (nothing {before})"]
        if self.empty:
            return [f"no changes: {b} runs what {a} runs"]
        lines = [f"changes from {a} to {b}:"]
        for change in self.changes:
            lines += [f"  {line}" for line in change.describe()]
        return lines

    def summary(self) -> str:
        """One line: ``image 1a2b…→3c4d…, env +FEATURE_X, web replicas 2→3``."""
        if self.first:
            return "first release"
        if self.empty:
            return "no changes"
        order: list[str] = []  # tokens, and each group's name where its first member is
        groups: dict[str, list[str]] = {}  # "env" -> ["+FEATURE_X", "~GREETING"]
        for change in self.changes:
            token = change.token()
            word, _, rest = token.partition(" ")
            if word in GROUPED:
                if word not in groups:
                    order.append(word)
                groups.setdefault(word, []).append(rest)
            else:
                order.append(token)

        def said(item: str) -> str:
            members = groups.get(item)
            if members is None:
                return item
            if item == "drift":
                return f"drift in {len(members)} unit{'s' if len(members) > 1 else ''}"
            return f"{item} " + " ".join(members)

        return ", ".join(said(item) for item in order)

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "after": self.after,
            "no_changes": self.empty,
            "changes": [c.to_json() for c in self.changes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Diff:
        return cls(
            before=data.get("before"),
            after=data.get("after"),
            changes=tuple(Change.from_json(c) for c in data.get("changes") or ()),
        )
