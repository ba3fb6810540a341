"""The Kubernetes backend: render → server-side apply → watch → records in Secrets.

``connect(app, slot)`` is what :func:`shipway.backends.open_backend` calls. The pieces:
``render`` (pure manifests), ``records`` (release records in Secrets), ``lease`` (the slot's
lock), ``rollout`` (pure done / doomed rules), ``watch`` (list + watch), ``backend`` (the
protocol, I/O at the edge). See docs/kubernetes.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shipway.backends.kubernetes.backend import KubernetesBackend
    from shipway.spec.model import App, Slot


def connect(app: App, slot: Slot) -> KubernetesBackend:
    from shipway.backends.kubernetes.backend import KubernetesBackend

    return KubernetesBackend(app, slot)
