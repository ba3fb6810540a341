"""The Docker hosts backend, assembled from one part per concern.

It never decides what to do (the plan does); it does one step on one host, and says what it
did there. Where each concern lives:

* :mod:`.state` — the hosts' connections, the per-host journal, the lock check of the one
  preamble every mutation starts with;
* :mod:`.reads` — resolve_image, observe, read_records, status, diff, logs, live_digest;
* :mod:`.steps` — apply, remove, wait, stop, and the records' writes; :mod:`.proxy` — the
  proxy and its routes (the switch); :mod:`.release_command` — the release phase;
* :mod:`.volumes` — the app's data volumes; :mod:`.images` — old images pruned after a
  deploy; :mod:`.destroy` — everything of the slot
  removed (its data volumes only when asked);
* :mod:`.oneoff` — one-off commands (``shipway run``) in a container of the release;
  :mod:`.runtime_files` — what a release's containers wrote inside themselves;
* :mod:`.health` — the health gate a wait checks; :mod:`.lock` — the slot's lock;
* :mod:`.certificates` — the certificates its routes are served with (status);
* :mod:`.accessories` — the slot's accessories (a container and its data volume on one
  host, published on that host's address only);
* :mod:`.hosts` — who else serves a host name (another slot's proxy on these hosts);
* :mod:`.edge` — library exceptions become shipway's errors there, and only there.
* :mod:`.freezes` — the slot's freeze (shipway freeze), a holder container on the first host.
* :mod:`.canary` — a canary's share in every host's proxy (:mod:`.caddy_canary`), its counts
  from their access logs, its notes on the first host.

Docker keeps no generations: it is a :class:`~shipway.backends.protocol.Backend`, not a
``GenerationBackend`` (a blue-green slot on it is refused by the engine with a hint).
"""

from __future__ import annotations

from shipway.backends.accessories import Accessories, AccessoryBackups
from shipway.backends.canary import Canaries
from shipway.backends.docker import render
from shipway.backends.docker.backups import DockerBackups
from shipway.backends.docker.canary import DockerCanaries
from shipway.backends.docker.certificates import DockerCertificates
from shipway.backends.docker.destroy import DockerDestroy
from shipway.backends.docker.freezes import DockerFreezes
from shipway.backends.docker.hosts import DockerOwners
from shipway.backends.docker.https import issuer_of
from shipway.backends.docker.lock import DockerLock
from shipway.backends.docker.oneoff import DockerCommands
from shipway.backends.docker.reads import DockerReads
from shipway.backends.docker.release_command import DockerReleaseCommand
from shipway.backends.docker.runtime_files import DockerRuntimeFiles
from shipway.backends.imagebuild import ImageBuilds
from shipway.backends.protocol import Backend, FansOut, PrunesImages
from shipway.errors import InputError
from shipway.release.artifact import Artifact
from shipway.release.model import Release
from shipway.spec.model import App, Slot
from shipway.spec.tls import refuse_unserved


class DockerBackend(
    ImageBuilds,
    DockerReads,
    DockerDestroy,
    DockerBackups,
    DockerReleaseCommand,
    DockerCommands,
    DockerRuntimeFiles,
    DockerLock,
    DockerOwners,
    DockerCertificates,
    DockerFreezes,
    DockerCanaries,
):
    """An app's processes as containers on one or many Docker engines."""

    name = "docker"

    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        """Pure: the units (files, proxy, containers, routes) a release means per host."""
        return render.render(app, slot, release)


def connect(app: App, slot: Slot) -> DockerBackend:
    """The backend for a docker slot. Opens nothing yet: each host is connected (and its
    SSH key verified) when first used."""
    routed = app.in_slot(slot.name) if slot.name in app.slots else app
    refuse_unserved("docker", routed.routes, slot.name, app.spec_file)
    issuer = issuer_of(routed, slot)
    auto = any(r.tls == "auto" for r in routed.routes)
    if auto and issuer is not None and issuer.hostname is None and len(slot.hosts) > 1:
        raise InputError(
            f"{app.spec_file}: slots.{slot.name}.hosts: the first host serving routes "
            f'({issuer.url}) orders the certificates of tls = "auto" routes, and the other '
            "hosts reach it by its SSH host name; a unix:// host has none (hint: list an "
            "ssh:// host first)"
        )
    return DockerBackend(app, slot)


_: type[Backend] = DockerBackend  # mypy checks it keeps the protocol (no generations)
_fans_out: type[FansOut] = DockerBackend  # and that its hosts take their steps at once
_prunes: type[PrunesImages] = DockerBackend  # and prunes its images after a deploy
_accessories: type[Accessories] = DockerBackend  # and runs accessories
_backups: type[AccessoryBackups] = DockerBackend  # and backs them up
_canaries: type[Canaries] = DockerBackend  # and canaries
