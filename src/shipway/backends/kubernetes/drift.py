"""Changes made to the slot's objects outside shipway, which observing cannot see.

``observe`` reads each object's digest from shipway's own annotation, which an edit by
``kubectl edit``, ``kubectl scale`` or another controller leaves as it was. Before the
engine answers "no changes" it asks here: each recorded unit is applied again as a
server-side dry run (field manager ``shipway``, forced, nothing persisted) and the result
is compared with the live object, managed fields, status and the server's bookkeeping left
out. Where they differ, the object was changed out of band; the deploy applies it again,
and the plan's object diff shows what that changes.

What must never happen: a write (only ``dry_run`` applies), or a Secret value in any text
(values are compared in memory, and every message passes the masking edge).
"""

from __future__ import annotations

from collections.abc import Mapping

from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.reads import comparable
from shipway.backends.kubernetes.sources import is_source_unit
from shipway.backends.kubernetes.state import RESOURCES, KubernetesState
from shipway.backends.kubernetes.steps import manifest
from shipway.errors import SecretUnavailable
from shipway.release.artifact import Unit
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret


class KubernetesDrift(KubernetesState):
    """``altered``: the recorded units the live objects no longer match (a source's, the
    source part judges: :mod:`.source_drift`)."""

    def altered(self, target: Target, release: Release, secrets: Mapping[str, Secret]) -> list[str]:
        self._serves(target)
        sourced = [u for u in release.artifact if is_source_unit(u)]
        rendered = [
            u.key for u in release.artifact if not is_source_unit(u) and self._altered(u, secrets)
        ]
        return rendered + (self.source.edited(sourced) if sourced else [])

    def _altered(self, unit: Unit, secrets: Mapping[str, Secret]) -> bool:
        kind, name = render.split_key(unit.key)
        if kind not in RESOURCES or kind == "Namespace":  # the namespace is not ours alone
            return False
        try:
            body = manifest(unit, secrets)
        except SecretUnavailable:  # a value not known here: nothing to compare it with
            return False
        with self._edge(f"comparing {unit.key} with its release record"):
            live = self._live(kind, name)
            if live is None:  # missing: observing says so already
                return False
            try:
                merged = self.client.apply(from_dict(body), force=True, dry_run=True)
            except ApiError as exc:
                if exc.status.code == 403:  # not ours to apply: not ours to judge
                    return False
                raise
        return comparable(live.to_dict()) != comparable(merged.to_dict())
