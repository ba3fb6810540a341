"""What a shared proxy's two pools of entries have in common (the host-name pool of
:mod:`.caddy`, the secure entries of :mod:`.https_pool`): where an entry is placed, how
``pool.json`` keeps them, and the one-line files an entry is made of. PURE."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: a free entry's name: never a request's (a ``Host`` with spaces is refused as a 400
#: before any route is matched), where an empty one would match a request without ``Host``
UNUSED = "- unused -"


def line(text: str) -> tuple[bytes, int]:
    """An entry file's content: ``text`` alone, no newline after it (Caddy reads a file's
    placeholder whole before 2.9: ``a.test\\n`` would match no request there)."""
    return text.encode(), 0o644


def port_of(body: Mapping[str, Any]) -> str:
    """The port a route body's upstreams listen on."""
    return str(body["upstreams"][0]).rsplit(":", 1)[-1]


def place(
    wanted: list[tuple[str, str]], previous: Mapping[int, tuple[str, str]], size: int
) -> tuple[dict[int, tuple[str, str]], int]:
    """Where each wanted ``(route, name)`` is, in a pool of ``size`` entries that had
    ``previous``: one kept keeps its place, one no longer wanted is freed, a new one takes
    the lowest place that was free before — not one freed by this change: a request matched
    there a moment before the new name is written would go to the new route —; the size
    doubles while that is not enough, and never shrinks."""
    kept = {i: e for i, e in previous.items() if e in set(wanted)}
    taken = set(kept.values())
    new = [e for e in wanted if e not in taken]
    free = (i for i in range(len(wanted) + len(previous) + 1) if i not in previous)
    entries = dict(kept) | {next(free): e for e in new}
    while entries and max(entries) >= size:
        size *= 2
    return dict(sorted(entries.items())), size


def table_of(raw: Mapping[str, Any], default: int) -> tuple[int, dict[int, tuple[str, str]]]:
    """A pool's size and taken entries as ``pool.json`` keeps them; ValueError, TypeError
    or AttributeError when it is not such."""
    size = int(raw.get("size", default))
    if size < 1:
        raise ValueError(size)
    entries = {
        int(i): (str(e[0]), str(e[1]))
        for i, e in dict(raw.get("entries") or {}).items()
        if isinstance(e, list) and len(e) == 2 and 0 <= int(i) < size
    }
    return size, entries


def table(size: int, entries: Mapping[int, tuple[str, str]]) -> dict[str, Any]:
    """What ``pool.json`` keeps of a pool (:func:`table_of` reads it back)."""
    return {"size": size, "entries": {str(i): list(e) for i, e in sorted(entries.items())}}
