"""Line numbers for key paths, so validation errors can point into the file.

``tomllib`` and ``yaml.safe_load`` return plain data without positions. For YAML the node
tree from ``yaml.compose`` carries them. For TOML we scan table headers and ``key =`` lines,
which covers the forms a spec uses (inline tables and multi-line arrays fall back to the
nearest enclosing key).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

KeyPath = tuple[str | int, ...]
Locator = Callable[[KeyPath], int | None]

_HEADER = re.compile(r"^\s*(\[\[?)\s*(.+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(
    r"""^\s*((?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+))*)\s*="""
)
_PART = re.compile(r"""\s*("[^"]*"|'[^']*'|[A-Za-z0-9_-]+)\s*(?:\.|$)""")


def _split_dotted(text: str) -> tuple[str, ...]:
    parts = []
    for m in _PART.finditer(text):
        part = m.group(1)
        if part[:1] in "\"'":
            part = part[1:-1]
        parts.append(part)
    return tuple(parts)


def toml_locator(text: str) -> Locator:
    """Scans the text on the first question only: a valid spec never asks."""
    scanned: list[Locator] = []

    def locate(path: KeyPath) -> int | None:
        if not scanned:
            scanned.append(_scan_toml(text))
        return scanned[0](path)

    return locate


def _scan_toml(text: str) -> Locator:
    lines: dict[KeyPath, int] = {}
    array_counts: dict[tuple[str, ...], int] = {}
    current: KeyPath = ()
    in_multiline = False
    for number, raw in enumerate(text.splitlines(), start=1):
        if in_multiline:
            if raw.count('"""') % 2 == 1 or raw.count("'''") % 2 == 1:
                in_multiline = False
            continue
        header = _HEADER.match(raw)
        if header and not _KEY.match(raw):
            names = _split_dotted(header.group(2))
            if header.group(1) == "[[":
                index = array_counts.get(names, -1) + 1
                array_counts[names] = index
                current = (*names, index)
            else:
                current = _resolve_arrays(names, array_counts)
            for end in range(1, len(current) + 1):
                lines.setdefault(current[:end], number)
            continue
        key = _KEY.match(raw)
        if key:
            path = (*current, *_split_dotted(key.group(1)))
            lines.setdefault(path, number)
            rest = raw[key.end() :]
            if rest.count('"""') % 2 == 1 or rest.count("'''") % 2 == 1:
                in_multiline = True
    return _locator(lines)


def _resolve_arrays(names: tuple[str, ...], counts: dict[tuple[str, ...], int]) -> KeyPath:
    """``[routes.x]`` after ``[[routes]]`` refers to the last element of the array."""
    out: list[str | int] = []
    for i, name in enumerate(names):
        out.append(name)
        prefix = names[: i + 1]
        if prefix in counts and i + 1 < len(names):
            out.append(counts[prefix])
    return tuple(out)


def yaml_locator(node: Any) -> Locator:
    lines: dict[KeyPath, int] = {}

    def walk(n: Any, path: KeyPath) -> None:
        kind = type(n).__name__
        if kind == "MappingNode":
            for key_node, value_node in n.value:
                child = (*path, str(key_node.value))
                lines.setdefault(child, key_node.start_mark.line + 1)
                walk(value_node, child)
        elif kind == "SequenceNode":
            for i, item in enumerate(n.value):
                lines.setdefault((*path, i), item.start_mark.line + 1)
                walk(item, (*path, i))

    if node is not None:
        walk(node, ())
    return _locator(lines)


def _locator(lines: dict[KeyPath, int]) -> Locator:
    def locate(path: KeyPath) -> int | None:
        for end in range(len(path), 0, -1):
            found = lines.get(path[:end])
            if found is not None:
                return found
        return None

    return locate


def no_lines(path: KeyPath) -> int | None:
    return None


def render_path(path: KeyPath) -> str:
    """``("slots", "prod", "routes", 0, "host")`` → ``slots.prod.routes[0].host``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else f'"{part}"'
            out += ("." if out else "") + text
    return out
