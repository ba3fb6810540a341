"""The Kubernetes backend: render → server-side apply → watch → records in Secrets.

It does one step at a time when the engine asks and decides nothing itself. The class is
assembled from one part per concern, each a class deriving from the typed state
(:mod:`.state`: the connection, the guard preamble, the edge where library errors become
shipway errors with secret values masked):

  * :mod:`.reads` — image, observe, records, status, diff, logs, the live digest;
  * :mod:`.steps` — records written, apply, remove, the release command, stop;
  * :mod:`.oneoff` — one-off commands (``shipway run``) in a pod of the release;
  * :mod:`.health` — the rollout and Job waits, and the failures they report;
  * :mod:`.blue_green` — generations: scale, replica waits, hosts pointed and dropped;
  * :mod:`.lock` — the slot's Lease held for an operation;
  * :mod:`.drift` — objects changed outside shipway (a server-side dry run of the record;
    :mod:`.source_drift` for a source's objects: their managed fields);
  * :mod:`.volumes` (pure) and :mod:`.claims` — a PersistentVolumeClaim per volume, its
    status; :mod:`.destroy` — every object of the slot deleted (claims only when asked);
  * :mod:`.source_reads`, :mod:`.source_steps`, :mod:`.source_waits` — a slot whose
    objects come from a source (manifests, a chart): render, observe, claim, apply, prune,
    wait on every kind; :mod:`.source_destroy` — destroy of its objects too;
    :mod:`.helm_records` — what ``--take-over`` does to a Helm release's records;
    :mod:`.set_image` — set-image on a workload shipway did not render.
"""

from __future__ import annotations

from shipway.backends.imagebuild import ImageBuilds
from shipway.backends.kubernetes.blue_green import KubernetesBlueGreen
from shipway.backends.kubernetes.lock import KubernetesLock
from shipway.backends.kubernetes.oneoff import KubernetesCommands
from shipway.backends.kubernetes.set_image import KubernetesSetImage
from shipway.backends.kubernetes.source_destroy import KubernetesSourceDestroy
from shipway.backends.kubernetes.source_drift import KubernetesSourceDrift
from shipway.backends.kubernetes.source_reads import KubernetesSourceReads
from shipway.backends.protocol import Drifts, GenerationBackend, SourceBackend
from shipway.spec.model import App, Slot


class KubernetesBackend(
    ImageBuilds,
    KubernetesSetImage,
    KubernetesSourceReads,
    KubernetesSourceDestroy,
    KubernetesBlueGreen,
    KubernetesCommands,
    KubernetesLock,
    KubernetesSourceDrift,
):
    """One app's slot in one namespace of one cluster."""

    name = "kubernetes"


def connect(app: App, slot: Slot) -> KubernetesBackend:
    """The backend for a kubernetes slot. Opens nothing yet: the kubeconfig is read and the
    API server reached on the first read or step."""
    return KubernetesBackend(app, slot)


_: type[GenerationBackend] = KubernetesBackend  # mypy checks it keeps the whole protocol
_drifts: type[Drifts] = KubernetesBackend  # and that it finds out-of-band changes
_sources: type[SourceBackend] = KubernetesBackend  # and the part a source slot needs
