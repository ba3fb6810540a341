"""``shipway ls``: every app and slot a state directory knows, without their specs.

A slot is known by its records file (``<state>/<app>/<slot>/records.json.gz``); the app it
ran is read back from its newest record's spec snapshot, so any directory on this machine
can list every app, as ``kubectl get deploy -A`` or ``dokku apps:list`` do. Read-only:
nothing is started (a slot whose supervisord is down shows nothing running).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from shipway.backends.local.dirs import SlotDirs, read_records_file, state_root
from shipway.errors import InputError, RecordError
from shipway.release import codec, history
from shipway.spec.model import App, Slot, SlotRegistry, Target
from shipway.spec.parse import from_snapshot

#: what a state directory holds beside the apps
_MACHINERY = frozenset({"supervisor", "router"})


def default_root(environ: Mapping[str, str] | None = None) -> Path:
    """The state directory a slot without ``state_dir`` uses ($SHIPWAY_STATE_DIR, …)."""
    return state_root(Slot(name="local"), Path.cwd(), os.environ if environ is None else environ)


def known(root: Path) -> list[tuple[str, str]]:
    """(app, slot) of every slot with records under ``root``, sorted."""
    out: list[tuple[str, str]] = []
    try:
        apps = sorted(p for p in root.iterdir() if p.is_dir() and p.name not in _MACHINERY)
    except OSError:
        return out
    for app_dir in apps:
        for slot_dir in sorted(p for p in app_dir.iterdir() if p.is_dir()):
            if SlotDirs(root, app_dir.name, slot_dir.name).records.exists():
                out.append((app_dir.name, slot_dir.name))
    return out


def recorded_app(root: Path, app: str, slot: str) -> App | None:
    """The app a slot last ran, as its newest record's snapshot says, pointed at ``root``
    (None: no record holds a snapshot this version can read)."""
    path = SlotDirs.of(root, Target(app, slot, "local")).records
    try:
        records = history.ordered(codec.from_json(r) for r in read_records_file(path))
    except (RecordError, KeyError, TypeError, ValueError):
        return None
    for record in reversed(records):
        if not record.spec:
            continue
        try:
            parsed = from_snapshot(record.spec, root)
        except InputError:
            continue
        if slot not in parsed.slots:
            continue
        here = replace(parsed.slots.get(slot), state_dir=str(root))
        return replace(parsed, slots=SlotRegistry(app=parsed.name, slots={slot: here}))
    return None


def recorded_app_or_refuse(root: Path, app_name: str, slot: str) -> App:
    """:func:`recorded_app`, or an input error naming the apps and slots ``root`` knows."""
    app = recorded_app(root, app_name, slot)
    if app is None:
        have = ", ".join(f"{a}/{s}" for a, s in known(root)) or "none"
        raise InputError(
            f"no app {app_name!r} with a local slot {slot!r} in {root} (have: {have}; hint: "
            "shipway ls lists them, SHIPWAY_STATE_DIR names another state directory)"
        )
    return app
