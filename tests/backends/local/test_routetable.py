"""The router's table rule (pure reading of table files): the newest claim of a host wins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shipway.backends.local.routetable import load_table


def table(path: Path, app: str, slot: str, generation: str | None, **hosts: Any) -> None:
    doc: dict[str, Any] = {"app": app, "slot": slot, "hosts": hosts}
    if generation:
        doc["generation"] = generation
    name = f"{app}.{slot}@{generation}.json" if generation else f"{app}.{slot}.json"
    (path / name).write_text(json.dumps(doc))


def claim(program: str, since: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"program": program, "upstreams": [f"127.0.0.1:{len(program)}"]}
    if since is not None:
        out["since"] = since
    return out


def test_the_newest_claim_of_a_host_wins_whatever_the_file_order(tmp_path: Path) -> None:
    table(tmp_path, "shop", "prod", "prod-b", **{"shop.test": claim("b", 20.0)})
    table(tmp_path, "shop", "prod", "prod-a", **{"shop.test": claim("a", 10.0)})
    table(tmp_path, "shop", "prod", "prod-c", **{"Shop.Test": claim("c", 30.0)})
    notes: list[str] = []
    won = load_table(tmp_path, notes)["shop.test"]
    assert (won["program"], won["generation"], won["app"], won["slot"]) == (
        "c",
        "prod-c",
        "shop",
        "prod",
    )
    assert notes == []  # generations of one slot replacing each other is not a conflict


def test_without_since_the_first_file_keeps_the_host_and_other_apps_are_noted(
    tmp_path: Path,
) -> None:
    table(tmp_path, "blog", "local", None, **{"x.localhost": claim("blog", None)})
    table(tmp_path, "shop", "local", None, **{"x.localhost": claim("shop", None)})
    notes: list[str] = []
    assert load_table(tmp_path, notes)["x.localhost"]["program"] == "blog"
    assert notes == [
        "host x.localhost claimed by blog.local.json and shop.local.json; "
        "the newest claim (blog.local.json) serves it, not shop.local.json"
    ]


def test_an_unreadable_table_file_is_skipped_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "broken.local.json").write_text("{not json")
    table(tmp_path, "shop", "local", None, **{"shop.localhost": claim("web", 1.0)})
    notes: list[str] = []
    assert list(load_table(tmp_path, notes)) == ["shop.localhost"]
    assert len(notes) == 1 and "broken.local.json" in notes[0]
    assert load_table(tmp_path / "missing") == {}
