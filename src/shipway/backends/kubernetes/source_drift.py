"""Objects of a source changed outside shipway, which observing cannot see (the digest
annotation stays as shipway wrote it): asked before the engine says "no changes".

Shipway's own render is judged by a server-side dry run of each recorded object
(:mod:`.drift`). A source's objects are judged from one list per kind instead: an object
another field manager wrote after shipway last applied it (``managedFields``) was changed
out of band, and the deploy applies it again. A dry run per object of a 200-object source
would cost two requests per object on every deploy that changes nothing.

What must never happen: a write (only lists), or a Secret value in any text.
"""

from __future__ import annotations

from collections.abc import Mapping

from shipway.backends.kubernetes.drift import KubernetesDrift
from shipway.backends.kubernetes.ownership import edited_since_applied
from shipway.backends.kubernetes.source_state import KubernetesSourceState
from shipway.backends.kubernetes.sources import is_source_unit, source_key
from shipway.release.artifact import Unit
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret


class KubernetesSourceDrift(KubernetesDrift, KubernetesSourceState):
    """``altered`` for a release that holds a source's objects."""

    def altered(self, target: Target, release: Release, secrets: Mapping[str, Secret]) -> list[str]:
        ours = [u for u in release.artifact if is_source_unit(u)]
        if not ours:
            return super().altered(target, release, secrets)
        self._serves(target)
        rendered = [
            u.key for u in release.artifact if not is_source_unit(u) and self._altered(u, secrets)
        ]
        return rendered + self._edited(ours)

    def _edited(self, units: list[Unit]) -> list[str]:
        wanted = {u.key for u in units}
        kinds = sorted({(str(u.body["apiVersion"]), u.kind) for u in units})
        out: list[str] = []
        for api_version, kind in kinds:
            with self._edge(f"reading the {kind} objects of {self.app.name}/{self.slot.name}"):
                listed = self._listed(api_version, kind)
            for live in listed[1] if listed else []:
                key = source_key(api_version, kind, str(live["metadata"]["name"]))
                if key in wanted and edited_since_applied(live):
                    out.append(key)
        return sorted(out)
