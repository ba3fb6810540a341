"""The Kubernetes backend: render → server-side apply → watch → records in Secrets.

It does one step at a time when the engine asks and decides nothing itself. The class is
assembled from one part per concern, each a class deriving from the typed state
(:mod:`.state`: the connection, the guard preamble, the edge where library errors become
shipway errors with secret values masked):

  * :mod:`.reads` — image, observe, records, status, diff, logs, the live digest;
  * :mod:`.steps` — records written, apply, remove, the release command, stop;
  * :mod:`.commands` — one-off commands (``shipway run``) in a pod of the release;
  * :mod:`.health` — the rollout and Job waits, and the failures they report;
  * :mod:`.blue_green` — generations: scale, replica waits, hosts pointed and dropped;
  * :mod:`.lock` — the slot's Lease held for an operation;
  * :mod:`.drift` — objects changed outside shipway (a server-side dry run of the record);
  * :mod:`.volumes` (pure) and :mod:`.claims` — a PersistentVolumeClaim per volume, its
    status; :mod:`.destroy` — every object of the slot deleted (claims only when asked).
"""

from __future__ import annotations

from shipway.backends.imagebuild import ImageBuilds
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.blue_green import KubernetesBlueGreen
from shipway.backends.kubernetes.commands import KubernetesCommands
from shipway.backends.kubernetes.destroy import KubernetesDestroy
from shipway.backends.kubernetes.drift import KubernetesDrift
from shipway.backends.kubernetes.lock import KubernetesLock
from shipway.backends.kubernetes.reads import KubernetesReads
from shipway.backends.protocol import Drifts, GenerationBackend
from shipway.release.artifact import Artifact
from shipway.release.model import Release
from shipway.spec.model import App, Slot


class KubernetesBackend(
    ImageBuilds,
    KubernetesReads,
    KubernetesDestroy,
    KubernetesBlueGreen,
    KubernetesCommands,
    KubernetesLock,
    KubernetesDrift,
):
    """One app's slot in one namespace of one cluster."""

    name = "kubernetes"

    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        """Pure: the manifests of ``release`` (see :mod:`.render`)."""
        return render.render(app, slot, release)


_: type[GenerationBackend] = KubernetesBackend  # mypy checks it keeps the whole protocol
_drifts: type[Drifts] = KubernetesBackend  # and that it finds out-of-band changes
