"""The local backend: a release runs as supervised OS processes behind an HTTP router.

It does one step at a time when the engine asks (the engine decides what and when). The
class is assembled from one part per concern, each a class over the shared state:

  state            LocalState: app, slot, state dir, supervisord, port table; the guard
  backend          LocalBackend: the parts assembled, render (pure), connect()
  reads            LocalReads: resolve_image, observe, records, status, diff
  logview          LocalLogs: logs, interleaved by time, of what runs or of one release
  steps            LocalSteps: records, apply (snapshot, program, route), remove, wait, stop
  programs         LocalPrograms: instances started, scaled, drained, stopped
  routes           LocalRoutes: route records and claims -> router table files, reloads
  health           LocalHealth: the health gate and its probes
  environment      LocalEnvironment: a release's snapshot and its process's env
  release_command  LocalReleaseCommand: the release command, before any program starts
  commands         LocalCommands: one-off commands (shipway run) in the deployed release
  runtime_files    LocalRuntimeFiles: what a release wrote inside its snapshot
  blue_green       LocalBlueGreen: generations scaled, waited on, pointed, dropped, deleted
  canary           LocalCanaries: a canary's share in the routes, its counts from the router
  volumes          LocalVolumes: volume directories, placed in snapshots, listed, deleted
  destroy          LocalDestroy: everything of the slot deleted (its volumes when asked)
  accessories      LocalAccessories: postgres/redis beside the app, supervised (servers)
  lock             LocalLock: the slot's flock
  freezes          LocalFreezes: the slot's freeze (shipway freeze), kept in its state dir

What must never happen, and where it is prevented:
  * a half-written state file — every write is a rename (:mod:`.dirs`);
  * a record misread — records are typed and versioned (:mod:`.records`);
  * a slot stuck behind a dead deploy — the lock is an flock (:mod:`.lock`);
  * a dropped request on a switch — routes move atomically and old programs are drained
    before they stop (:mod:`.routes`, :mod:`.router`); a generation serving a host is never
    put to sleep (:mod:`.blue_green`);
  * two programs on one port — one table hands ports out (:mod:`.ports`);
  * a snapshot pruned under a generation that may wake again — every kept generation's
    snapshot is in use until ``gc`` deletes the generation;
  * a secret value in output — env files and config files are the only places values are
    written; log lines shown to the user are masked;
  * a subprocess from ``plan``/``status``/``observe`` — reads never start supervisord or
    the router, they report what is (not) running (:mod:`.reads`).
"""

from __future__ import annotations

from shipway.backends.accessories import Accessories, AccessoryBackups
from shipway.backends.canary import Canaries
from shipway.backends.local import render
from shipway.backends.local.backups import LocalBackups
from shipway.backends.local.blue_green import LocalBlueGreen
from shipway.backends.local.build import LocalBuilds
from shipway.backends.local.canary import LocalCanaries
from shipway.backends.local.destroy import LocalDestroy
from shipway.backends.local.dirs import router_port
from shipway.backends.local.freezes import LocalFreezes
from shipway.backends.local.lock import LocalLock
from shipway.backends.local.oneoff import LocalCommands
from shipway.backends.local.reads import LocalReads
from shipway.backends.local.release_command import LocalReleaseCommand
from shipway.backends.local.runtime_files import LocalRuntimeFiles
from shipway.backends.protocol import GenerationBackend, ViewsLogs
from shipway.release.artifact import Artifact
from shipway.release.model import Release
from shipway.spec.model import App, Slot
from shipway.spec.tls import refuse_unserved


class LocalBackend(
    LocalBuilds,
    LocalReads,
    LocalDestroy,
    LocalBackups,
    LocalBlueGreen,
    LocalCanaries,
    LocalReleaseCommand,
    LocalCommands,
    LocalRuntimeFiles,
    LocalLock,
    LocalFreezes,
):
    """This machine's own processes, supervised, behind an HTTP router (docs/local.md)."""

    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        """Pure: the snapshot, program and route units a release means here (:mod:`.render`)."""
        port = self.router_port if slot.name == self.slot.name else router_port(slot, self.environ)
        return render.render(app, slot, release, port)


def connect(app: App, slot: Slot) -> LocalBackend:
    """What :func:`shipway.backends.open_backend` calls. It does no I/O: the state directory,
    supervisord and the router are created or started only by the first mutating step, so
    ``plan`` and ``status`` never start anything."""
    routes = slot.routes if slot.routes is not None else app.routes
    refuse_unserved("local", routes, slot.name, app.spec_file)  # tls = "auto": docker only
    return LocalBackend(app, slot)


_: type[GenerationBackend] = LocalBackend  # mypy checks it keeps the whole protocol
_logs: type[ViewsLogs] = LocalBackend  # and shows logs by time and by release
_accessories: type[Accessories] = LocalBackend  # and runs accessories
_canaries: type[Canaries] = LocalBackend  # and runs canaries
_backups: type[AccessoryBackups] = LocalBackend  # and backs them up
