"""The part of a backend that keeps a slot's freeze in its target (``shipway freeze``),
where every machine reads it: a file in the local state directory, a labelled holder
container on the Docker slot's first host, a ConfigMap in the Kubernetes namespace.

At most one freeze per app and slot: freezing again replaces it, ``unfreeze`` removes it.
A freeze is no secret, and holds none.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from shipway.errors import RecordError
from shipway.guard import Clearance
from shipway.spec.freeze import Freeze
from shipway.spec.model import App, Target


@runtime_checkable
class KeepsFreezes(Protocol):
    def read_freeze(self, target: Target) -> Freeze | None: ...

    def write_freeze(self, clearance: Clearance, target: Target, freeze: Freeze | None) -> None:
        """Set (``freeze``) or lift (None) the slot's freeze."""
        ...


def kept_freezes(backend: object, target: Target) -> list[Freeze]:
    """The freeze ``backend`` keeps for ``target`` (none: a backend that keeps none)."""
    if not isinstance(backend, KeepsFreezes):
        return []
    found = backend.read_freeze(target)
    return [found] if found is not None else []


def encode_freeze(freeze: Freeze) -> str:
    return json.dumps({"version": 1, **freeze.to_json()}, sort_keys=True)


def decode_freeze(text: str, where: str) -> Freeze:
    try:
        data: Any = json.loads(text)
        return Freeze.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise RecordError(f"the freeze kept in {where} cannot be read: {exc}") from exc


def kept_in(app: App, slot: str, given: object | None) -> list[Freeze]:
    """The freeze ``slot``'s target keeps, read through ``given`` (a backend) or one
    opened for the read and closed after it."""
    from shipway.backends import open_backend

    target = app.slots.target(slot)
    if given is not None:
        return kept_freezes(given, target)
    opened = open_backend(app, app.slots.get(slot))
    try:
        return kept_freezes(opened, target)
    finally:
        opened.close()
