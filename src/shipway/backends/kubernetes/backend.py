"""The Kubernetes backend: render → server-side apply → watch → records in Secrets.

It does one step at a time when the engine asks and decides nothing itself. The class is
assembled from one part per concern, each a class deriving from the typed state
(:mod:`.state`: the connection, the guard preamble, the edge where library errors become
shipway errors with secret values masked); no name is defined in two of them, so no part
overrides another:

  * :mod:`.reads` — image, render, observe, records, status, diff, logs, the live digest;
  * :mod:`.steps` — records written, apply, remove, the release command, stop;
  * :mod:`.oneoff` — one-off commands (``shipway run``) in a pod of the release;
  * :mod:`.health` — the rollout and Job waits, and the failures they report;
  * :mod:`.blue_green` — generations: scale, replica waits, hosts pointed and dropped;
  * :mod:`.canary` — a canary's share in Gateway API HTTPRoutes, its counts from
    Prometheus (:mod:`.gateway`), and the preflight that refuses a canary where the
    cluster cannot run one;
  * :mod:`.lock` — the slot's Lease held for an operation;
  * :mod:`.drift` — objects changed outside shipway (a server-side dry run of the record);
  * :mod:`.volumes` (pure) and :mod:`.claims` — a PersistentVolumeClaim per volume, its
    status; :mod:`.destroy` — every object of the slot deleted (claims only when asked);
  * :mod:`.accessories` — the slot's accessories: a StatefulSet with a claim, a ClusterIP
    Service and a Secret each, which no app operation lists or touches.

What a slot whose objects come from a source (manifests, a chart) does differently is one
object the backend holds, ``self.source`` (:mod:`.source_slot`: render, observe, claim,
apply, prune, wait on every kind, drift, destroy, and set-image on a workload shipway did
not render); each method above where a source slot differs says so in one branch and
calls it. :mod:`.helm_records` is what ``--take-over`` does to a Helm release's records.
"""

from __future__ import annotations

from shipway.backends.accessories import Accessories, AccessoryBackups
from shipway.backends.imagebuild import ImageBuilds
from shipway.backends.kubernetes.backups import KubernetesBackups
from shipway.backends.kubernetes.blue_green import KubernetesBlueGreen
from shipway.backends.kubernetes.destroy import KubernetesDestroy
from shipway.backends.kubernetes.drift import KubernetesDrift
from shipway.backends.kubernetes.freezes import KubernetesFreezes
from shipway.backends.kubernetes.lock import KubernetesLock
from shipway.backends.kubernetes.oneoff import KubernetesCommands
from shipway.backends.kubernetes.reads import KubernetesReads
from shipway.backends.protocol import (
    Drifts,
    Failure,
    GenerationBackend,
    Reporter,
    SourceBackend,
)
from shipway.guard import Clearance
from shipway.plan.model import SetImage, WaitImage
from shipway.spec.model import App, Slot, Target
from shipway.spec.source import ContainerRef
from shipway.spec.tls import refuse_unserved


class KubernetesBackend(
    ImageBuilds,
    KubernetesReads,
    KubernetesDestroy,
    KubernetesBackups,
    KubernetesBlueGreen,
    KubernetesCommands,
    KubernetesLock,
    KubernetesDrift,
    KubernetesFreezes,
):
    """One app's slot in one namespace of one cluster."""

    name = "kubernetes"

    # -- set-image: a workload shipway did not render, found and watched as a source's
    # objects are (the source part does it)

    def workload_image(self, target: Target, ref: ContainerRef) -> tuple[str, str]:
        return self.source.workload_image(target, ref)

    def set_image(
        self, clearance: Clearance, target: Target, step: SetImage, reporter: Reporter
    ) -> None:
        self.source.set_image(clearance, target, step, reporter)

    def wait_image(
        self, target: Target, step: WaitImage, deadline: float, reporter: Reporter
    ) -> Failure | None:
        return self.source.wait_image(target, step, deadline, reporter)


def connect(app: App, slot: Slot) -> KubernetesBackend:
    """The backend for a kubernetes slot. Opens nothing yet: the kubeconfig is read and the
    API server reached on the first read or step."""
    routes = slot.routes if slot.routes is not None else app.routes
    refuse_unserved("kubernetes", routes, slot.name, app.spec_file)  # tls = "auto": docker only
    return KubernetesBackend(app, slot)


_: type[GenerationBackend] = KubernetesBackend  # mypy checks it keeps the whole protocol
_drifts: type[Drifts] = KubernetesBackend  # and that it finds out-of-band changes
_sources: type[SourceBackend] = KubernetesBackend  # and the part a source slot needs
_accessories: type[Accessories] = KubernetesBackend  # and runs accessories
_backups: type[AccessoryBackups] = KubernetesBackend  # and backs them up
