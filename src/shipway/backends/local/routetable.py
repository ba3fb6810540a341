"""The router's table: which app, slot and generation serves each host. PURE reading of the
table files; standard library only, because the router process loads it too (and never
imports shipway).

One JSON file per claimant in ``router/<port>/tables/``, written atomically by the backend:
``<app>.<slot>.json`` for a rolling slot, ``<app>.<slot>@<generation>.json`` for each
generation of a blue-green slot::

    {"app": ..., "slot": ..., "generation": ... | null,
     "hosts": {host: {"program": key, "upstreams": ["127.0.0.1:port", ...], "since": t,
                      "canary": {...} (optional: split.py)}}}

Several files may claim one host: the *newest* claim (largest ``since``) serves it, ties
going to the first file by name (files without ``since`` count as 0). So pointing a host at
a new generation is one new claim and one reload — an atomic switch — and a stale claim
left behind (an old generation's route whose drop failed) loses and does no harm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_table(tables: Path, notes: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """host -> {"program", "upstreams", "app", "slot", "generation", "since", "file"}: the
    winning claim of every host. Unreadable files are skipped (with a note); so are hosts
    claimed by two different app/slots, after a note naming both (the newest still wins)."""
    table: dict[str, dict[str, Any]] = {}
    try:
        paths = sorted(tables.glob("*.json"))
    except OSError:
        paths = []
    for path in paths:
        try:
            doc = json.loads(path.read_text())
            hosts = dict(doc.get("hosts") or {})
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            if notes is not None:
                notes.append(f"skipping {path}: {exc}")
            continue
        for host, entry in hosts.items():
            claim = {
                "program": entry.get("program"),
                "upstreams": list(entry.get("upstreams") or []),
                "canary": entry.get("canary") or None,  # a split by weight (split.py)
                "app": doc.get("app"),
                "slot": doc.get("slot"),
                "generation": doc.get("generation"),
                "since": float(entry.get("since") or 0.0),
                "file": path.name,
            }
            key = host.lower()
            held = table.get(key)
            if held is None:
                table[key] = claim
                continue
            newer = claim["since"] > held["since"]
            if notes is not None and (held["app"], held["slot"]) != (claim["app"], claim["slot"]):
                winner, loser = (claim, held) if newer else (held, claim)
                notes.append(
                    f"host {key} claimed by {held['file']} and {claim['file']}; "
                    f"the newest claim ({winner['file']}) serves it, not {loser['file']}"
                )
            if newer:
                table[key] = claim
    return table
