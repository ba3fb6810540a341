"""The slot's claims as ``status`` and plans show them: each PersistentVolumeClaim, its
phase (``Pending`` until a volume is bound to it), what it asks for and what it got.

Kubernetes does not say how much of a claim is used (that is the kubelet's, per node), so
``size_bytes`` stays unknown here; the capacity bound is what the claim holds.
"""

from __future__ import annotations

from typing import Any

from shipway.backends.kubernetes import volumes
from shipway.backends.kubernetes.state import RESOURCES, KubernetesState
from shipway.backends.volume_status import VolumeStatus
from shipway.plan.model import Plan
from shipway.spec.model import App, Slot, Target


class KubernetesClaims(KubernetesState):
    """The protocol's Volumes."""

    def volume_notes(self, app: App, slot: Slot, plan: Plan) -> list[str]:
        return volumes.volume_notes(app, slot, plan)

    def _claims(self) -> dict[str, Any]:
        """Spec volume name -> the slot's claim of it (none when the identity may not list
        claims and the app declares no volume: a role written before volumes)."""
        from lightkube.core.exceptions import ApiError

        try:
            found = list(
                self.client.list(
                    RESOURCES["PersistentVolumeClaim"],
                    namespace=self.namespace,
                    labels=self._labels(),
                )
            )
        except ApiError as exc:
            if exc.status.code == 403 and not self.app.volumes:
                return {}
            raise
        out = {}
        for claim in found:
            labels = claim.metadata.labels or {}
            out[str(labels.get(volumes.VOLUME_LABEL) or claim.metadata.name)] = claim
        return out

    def volumes(self, target: Target) -> list[VolumeStatus]:
        self._serves(target)
        with self._edge(f"listing the claims of {target}"):
            claims = self._claims()
        out = []
        for name in sorted(set(self.app.volumes) | set(claims)):
            claim = claims.get(name)
            declared = self.app.volumes.get(name)
            if claim is None:
                assert declared is not None
                out.append(
                    VolumeStatus(
                        name=name,
                        where=f"PersistentVolumeClaim/{volumes.claim_name(self.app.name, name)}",
                        state="not created yet",
                        requested=declared.size,
                        access_mode=declared.access_mode,
                    )
                )
                continue
            spec, status = claim.spec, claim.status
            requested = ((spec.resources.requests or {}) if spec and spec.resources else {}).get(
                "storage"
            )
            capacity = ((status.capacity or {}) if status else {}).get("storage")
            modes = (spec.accessModes or []) if spec else []
            out.append(
                VolumeStatus(
                    name=name,
                    where=f"PersistentVolumeClaim/{claim.metadata.name}",
                    state=str(status.phase) if status and status.phase else "Pending",
                    requested=str(requested) if requested else None,
                    capacity=str(capacity) if capacity else None,
                    access_mode=",".join(modes) or None,
                    declared=declared is not None,
                )
            )
        return out
