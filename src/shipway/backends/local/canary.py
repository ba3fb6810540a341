"""A canary in the local router: the route records carry it, the router splits and counts.

Setting a share writes ``canary = {"id", "program", "weight"}`` into the route record of
every host the new release moves (``routes.json``), rewrites the table files and reloads
the router — the same atomic switch as a route's. The route itself still names the stable
program, so whatever stops a canary halfway (an abort, a ``kill -9``) leaves a route that
observing reports as not the recorded one: the undo, or the next run's recovery, applies
the recorded route again — 100 % to one release. The router counts what it answered per
release (:mod:`.split`); this module reads its counts and keeps the engine's and a person's
notes about the canary in ``run/canary-<name>.json``. It decides nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from shipway.backends.canary import CanaryCounts, canary_id
from shipway.backends.local.dirs import SlotDirs, read_json, write_json
from shipway.backends.local.records import read_routes, write_routes
from shipway.backends.local.render import RouteBody
from shipway.backends.local.routes import LocalRoutes
from shipway.backends.protocol import Reporter
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.plan.canary import Tally
from shipway.release.model import Release
from shipway.spec.canary import answer_timeout_entry
from shipway.spec.model import Target

NOTES = ("state", "decision")


class LocalCanaries(LocalRoutes):
    """The canary's share in the route records, its counts from the router."""

    def shift_traffic(
        self, clearance: Clearance, target: Target, release: Release, percent: int, r: Reporter
    ) -> None:
        d = self._guarded(clearance, target)
        routes = read_routes(d)
        before = dict(routes)
        moved: list[str] = []
        if percent == 0:
            routes = {h: replace(route, canary=None) for h, route in routes.items()}
        else:
            ident = canary_id(release)
            # said in the entry only when set (the router's default is the spec's)
            patience = answer_timeout_entry(release.spec, release.slot)
            for unit in release.artifact:
                if unit.kind != "route":
                    continue
                body = RouteBody.of(unit)
                held = routes.get(body.host)
                if held is None or held.program == body.program:
                    continue  # a new host, or one already on it: nothing to split
                if body.program not in self._program_keys(d):
                    raise BackendError(f"the canary's {body.program} is not running")
                canary = {"id": ident, "program": body.program, "weight": percent, **patience}
                routes[body.host] = replace(held, canary=canary)
                moved.append(body.host)
        if routes == before:
            return
        write_routes(d, routes)

        def undo() -> None:
            write_routes(d, before)

        self._switch(d, {route.router_port for route in routes.values()}, undo)
        if moved:
            r.line(f"  {percent}% of {', '.join(sorted(moved))} to r{release.revision}")
        else:
            r.line("  every request to the stable release (the canary's share is 0)")

    def _program_keys(self, d: SlotDirs) -> set[str]:
        from shipway.backends.local.records import read_programs

        return set(read_programs(d))

    def canary_counts(self, target: Target) -> CanaryCounts | None:
        d = self.dirs(target)
        held = [route for route in read_routes(d).values() if route.canary is not None]
        if not held:
            return None
        first = held[0].canary
        assert first is not None
        ident = str(first["id"])
        doc = self.router(held[0].router_port).canary_counts()
        counts = doc.get("canaries", {}).get(ident, {})
        # the share the router splits by, not the record's: the record is written first, and
        # the router has the share only once its reload returned (0 until then)
        weights = doc.get("weights")
        percent = int(weights.get(ident, 0)) if isinstance(weights, dict) else int(first["weight"])
        return CanaryCounts(
            canary=ident,
            percent=percent,
            stable=Tally.from_json(counts.get("stable") or {}),
            on_canary=Tally.from_json(counts.get("canary") or {}),
        )

    def canary_note(
        self, clearance: Clearance, target: Target, name: str, doc: Mapping[str, Any] | None
    ) -> None:
        d = self._guarded(clearance, target)
        path = self._note_path(d, name)
        if doc is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, dict(doc), mode=0o600)

    def read_canary_note(self, target: Target, name: str) -> dict[str, Any] | None:
        doc = read_json(self._note_path(self.dirs(target), name), None)
        return doc if isinstance(doc, dict) else None

    @staticmethod
    def _note_path(d: SlotDirs, name: str) -> Path:
        if name not in NOTES:
            raise InputError(f"no canary note {name!r} (known: {', '.join(NOTES)})")
        return d.run / f"canary-{name}.json"
