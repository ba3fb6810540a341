"""Objects of a source changed outside shipway, which observing cannot see (the digest
annotation stays as shipway wrote it): asked before the engine says "no changes".

One rule for both kinds of slot: an object has drifted when applying it again would change
it. Shipway's own render is judged by a server-side dry run of each recorded object
(:mod:`.drift`). A source's objects are listed once per kind first, and only an object
another field manager wrote after shipway last applied it (``managedFields``) gets the same
dry run: a dry run per object of a 200-object source would cost two requests per object on
every deploy that changes nothing. So a field another manager *added* (``kubectl set env``)
is not drift on either kind of slot: shipway never set it, an apply leaves it, and a deploy
that changes nothing else records nothing; a field shipway set and another manager changed
is drift, and the deploy puts it back.

What must never happen: a write (only lists), or a Secret value in any text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.types import PatchType

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.discovery import ServedKind
from shipway.backends.kubernetes.ownership import edited_since_applied
from shipway.backends.kubernetes.reads import comparable
from shipway.backends.kubernetes.source_state import SourceState
from shipway.backends.kubernetes.sources import source_key
from shipway.release.artifact import Unit
from shipway.spec.secrets import names_in, reveal


class SourceDrift(SourceState):
    """What ``altered`` finds of a release's source objects."""

    def edited(self, units: list[Unit]) -> list[str]:
        """The keys of the source's objects (``units``) another field manager changed so
        that applying them again would change them."""
        wanted = {u.key: u for u in units}
        kinds = sorted({(str(u.body["apiVersion"]), u.kind) for u in units})
        out: list[str] = []
        for api_version, kind in kinds:
            with self.state._edge(
                f"reading the {kind} objects of {self.state.app.name}/{self.state.slot.name}"
            ):
                listed = self._listed(api_version, kind)
            if listed is None:
                continue
            served, objects = listed
            for live in objects:
                key = source_key(api_version, kind, str(live["metadata"]["name"]))
                unit = wanted.get(key)
                edited = unit is not None and edited_since_applied(live)
                if edited and unit is not None and self._would_change(unit, live, served):
                    out.append(key)
        return sorted(out)

    def _would_change(self, unit: Unit, live: Mapping[str, Any], served: ServedKind) -> bool:
        """Whether applying the unit again (a forced server-side dry run, nothing persisted)
        would change the live object. A Secret whose values this process does not hold
        cannot be compared: it counts as changed (applying it again is harmless)."""
        values = self._src().values
        names = names_in(json.dumps(unit.body.get("data") or {})) if unit.kind == "Secret" else []
        if any(n not in values for n in names):
            return True
        body = reveal(render.with_digest(unit), {n: values[n] for n in names})
        self._as_applied(body, served)
        name = str(body["metadata"]["name"])
        with self.state._edge(f"comparing {unit.key} with its release record"):
            try:
                merged = self.state.client.patch(
                    served.resource,
                    name,
                    body,
                    namespace=self.state.namespace if served.namespaced else None,
                    patch_type=PatchType.APPLY,
                    field_manager=render.MANAGER,
                    force=True,
                    dry_run=True,
                ).to_dict()
            except ApiError as exc:
                if exc.status.code == 403:  # not ours to apply: not ours to judge
                    return False
                raise
        return _plain(live) != _plain(merged)


def _plain(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as compared: :func:`comparable`, without the type (a list's items lack
    it)."""
    out = comparable(obj)
    out.pop("apiVersion", None)
    out.pop("kind", None)
    return out
