"""``masks.json``: the secret values a slot's kept logs may hold, as salted digests.

A process's log outlives the process (and its env file, the other place its secret values
are known): ``shipway logs`` of a stopped slot, or of a release since rolled back, is read
by someone who need not have the secrets in their environment. So every secret value given
to a process or a release command is remembered here — its length and a salted digest,
never the value — and :class:`~shipway.spec.secrets.Masker` masks it in those logs by the
same rule as a value it knows.

The file (0600, under the slot's lock): ``{"version": 1, "salt": "<hex>", "masks":
{"<digest>": {"length": N, "digest": "<digest>"}}}``.
"""

from __future__ import annotations

import secrets as random
from collections.abc import Iterable
from pathlib import Path

from shipway.backends.local.dirs import SlotDirs, read_json, write_json
from shipway.backends.local.records import check_version
from shipway.errors import BackendError
from shipway.spec.secrets import HashedValue

VERSION = 1


def _path(d: SlotDirs) -> Path:
    return d.base / "masks.json"


def read_masks(d: SlotDirs) -> tuple[str, list[HashedValue]]:
    """(salt, the digests remembered); ("", []) before anything was remembered."""
    path = _path(d)
    doc = read_json(path, {}) or {}
    if not isinstance(doc, dict):
        raise BackendError(f"{path} holds no JSON object")
    check_version(path, doc)
    masks = []
    for raw in dict(doc.get("masks") or {}).values():
        try:
            masks.append(HashedValue(int(raw["length"]), str(raw["digest"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendError(f"{path}: a mask cannot be read ({exc})") from exc
    return str(doc.get("salt") or ""), masks


def remember(d: SlotDirs, values: Iterable[str]) -> None:
    """Add the digests of ``values`` (secret values given to a process of the slot)."""
    wanted = [v for v in values if v]
    if not wanted:
        return
    salt, masks = read_masks(d)
    salt = salt or random.token_hex(16)
    known = {m.digest: m for m in masks}
    fresh = {h.digest: h for h in (HashedValue.of(v, salt) for v in wanted)}
    if fresh.keys() <= known.keys():
        return
    merged = {**known, **fresh}
    doc = {"version": VERSION, "salt": salt, "masks": {k: m.to_json() for k, m in merged.items()}}
    write_json(_path(d), doc, 0o600)
