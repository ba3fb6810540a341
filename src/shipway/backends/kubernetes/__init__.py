"""The Kubernetes backend: render → server-side apply → watch → records in Secrets.

``connect(app, slot)`` is what :func:`shipway.backends.open_backend` calls. ``backend``
assembles the class from one part per concern — ``state`` (the typed state, the guard
preamble, the edge where library errors become shipway errors), ``reads``, ``steps``,
``health`` (rollout and Job waits), ``blue_green`` (generations), ``lock`` — over the pure
helpers ``render`` (manifests), ``rollout`` (done / doomed rules) and ``generations``, and
``records`` (release records in Secrets), ``lease`` (the slot's Lease), ``watch`` (list +
watch), ``client``, ``image``, ``helm``. See docs/kubernetes.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shipway.backends.kubernetes.backend import KubernetesBackend
    from shipway.spec.model import App, Slot


def connect(app: App, slot: Slot) -> KubernetesBackend:
    from shipway.backends.kubernetes.backend import KubernetesBackend

    return KubernetesBackend(app, slot)
