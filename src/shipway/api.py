"""The public Python API. The command line is a thin layer over these functions.

Every mutating function asks the guard first (``confirm`` is the slot's name typed back,
needed for guarded and production slots); nothing is opened or touched before that.
``backend`` may be given explicitly (tests inject the in-memory backend); otherwise the
slot's own backend is opened.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shipway import spec as _spec
from shipway.backends import open_backend
from shipway.backends.accessories import AccessoryStatus, accessories_of, runs_accessories
from shipway.backends.certificate_status import CertificateStatus, ServesCertificates
from shipway.backends.freezes import kept_freezes, kept_in
from shipway.backends.logs import LogLine, LogQuery, LogView
from shipway.backends.protocol import (
    Backend,
    Built,
    GenerationInfo,
    Leftover,
    ProcessStatus,
    Reporter,
    ViewsLogs,
)
from shipway.backends.slot_state import NOTHING, SlotState, slot_state
from shipway.backends.volume_status import VolumeStatus
from shipway.engine.timeouts import DEFAULT_ROLLBACK_TIMEOUT, DEFAULT_TIMEOUT
from shipway.errors import InputError
from shipway.guard import Clearance, Guard
from shipway.plan.change import Diff
from shipway.plan.diff import between
from shipway.plan.model import Plan
from shipway.release import history as _history
from shipway.release.model import Release
from shipway.spec.freeze import Freeze, active
from shipway.spec.model import App, Target

if TYPE_CHECKING:
    from shipway.backends.backups import BackupFile
    from shipway.backends.kubernetes.helm import HelmRelease
    from shipway.engine import Engine, Outcome
    from shipway.engine.backups import Restored
    from shipway.engine.request import DeployRequest


def load(path: str | Path | None = None) -> App:
    """Find, read and validate a spec (raises SpecInvalid listing every problem)."""
    return _spec.load(path)


def clear(
    app: App, slot: str, confirm: str | None = None, backend: Backend | None = None
) -> Clearance:
    """The guard's clearance for ``slot`` (GuardRefused; SlotFrozen: guard.py, spec/freeze.py)."""
    return Guard(app.slots).clear(slot, confirm, kept=lambda: kept_in(app, slot, backend))


def freeze(
    app: App, slot: str, frozen: Freeze | None, *, confirm: str | None = None,
    backend: Backend | None = None, reporter: Reporter | None = None,
) -> list[Freeze]:  # fmt: skip
    """Keep ``frozen`` (None: lift it) in ``slot``'s target, under the slot's lock, told
    as an operation; the freezes that hold now."""
    clearance = Guard(app.slots).clear(slot, confirm)
    with _engine(app, slot, backend, reporter) as engine:
        return engine.keep_freeze(clearance, app, slot, frozen)


@contextmanager
def _backend(app: App, slot: str, given: Backend | None) -> Iterator[Backend]:
    """The caller's backend, or one opened for the call and closed after it (its
    connections, watch threads and SSH sessions go with it)."""
    if given is not None:
        yield given
        return
    opened = open_backend(app, app.slots.get(slot))
    try:
        yield opened
    finally:
        opened.close()


@contextmanager
def _engine(
    app: App, slot: str, backend: Backend | None, reporter: Reporter | None
) -> Iterator[Engine]:
    """The engine over the slot's backend: imported here, by the operations that sequence,
    so that the reads (``status``, ``history``, ``logs``) never load it."""
    from shipway.engine import Engine

    with _backend(app, slot, backend) as b:
        yield Engine(b, reporter)


@contextmanager
def _cleared(
    app: App, slot: str, confirm: str | None, backend: Backend | None, reporter: Reporter | None
) -> Iterator[tuple[Clearance, Engine]]:
    """:func:`clear`, then the engine, over one backend: the one the guard read the slot's
    freezes through (opened only when it reads them) is the operation's, not a second
    one connected anew (over SSH: a handshake and the engine's version asked again)."""
    from shipway.engine import Engine

    opened: list[Backend] = []

    def the_backend() -> Backend:
        if backend is not None:
            return backend
        if not opened:
            opened.append(open_backend(app, app.slots.get(slot)))
        return opened[0]

    try:
        clearance = Guard(app.slots).clear(
            slot, confirm, kept=lambda: kept_in(app, slot, the_backend())
        )
        yield clearance, Engine(the_backend(), reporter)
    finally:
        for b in opened:
            b.close()


def plan(
    app: App,
    slot: str,
    *,
    image: str | None = None,
    take_host: bool = False,
    take_over: bool = False,
    repair: bool = False,
    force: bool = False,
    build: bool = False,
    request: DeployRequest | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Plan:
    """What a deploy (or, with ``repair``, a repair) would do now, and what it changes
    (``plan.diff``; ``plan.unchanged``: "no changes", unless ``force``). Mutates nothing,
    starts nothing; with ``build``, its first step says what would be built, or reused.
    ``take_over``: plan taking objects of the slot's source that someone else owns (without
    it they are refused, naming their owners). ``request``: the options as one value (the
    command line builds one); the keywords are its fields."""
    request = _request(
        request, image=image, take_host=take_host, take_over=take_over, force=force, build=build
    )
    image, force, build = request.image, request.force, request.build
    if repair and (image is not None or force or build):
        flag = "--image" if image is not None else "--force" if force else "--build"
        raise InputError(f"a repair re-asserts the deployed release: it takes no {flag}")
    with _engine(app, slot, backend, reporter) as engine:
        if repair:
            return engine.plan_repair(app, slot)
        return engine.plan_deploy(app, slot, request)


def diff(
    app: App,
    slot: str,
    before: int | None = None,
    after: int | None = None,
    *,
    backend: Backend | None = None,
) -> Diff:
    """What differs between two releases of ``slot``, secrets named and never shown.

    No revisions: the deployed release against what a deploy would run now (and where the
    target drifted from it). One: that revision against its predecessor. Two: ``before``
    against ``after``. With revisions, from the release records alone — it works after
    the images and snapshots are gone. Read-only."""
    if before is None and after is not None:
        raise InputError("give the earlier revision too: shipway diff SLOT REV_A REV_B")
    with _engine(app, slot, backend, None) as engine:
        if before is None:
            return engine.changes(app, slot)
        records = engine.backend.read_records(app.slots.target(slot))
        return between(records, before, after)


def object_diff(
    app: App, slot: str, the_plan: Plan, *, backend: Backend | None = None
) -> list[str]:
    """How the target's own objects would change under ``the_plan`` (Kubernetes: a
    server-side dry run against the live objects; Docker: per host), secret data masked.
    Read-only."""
    with _backend(app, slot, backend) as b:
        return b.diff(app.slots.target(slot), the_plan)


def _request(given: DeployRequest | None, **fields: Any) -> DeployRequest:
    """The request a call was given, or one made of its keywords — never both: a keyword
    left at its default beside a request is fine, any other is refused."""
    from shipway.engine.request import DeployRequest

    if given is None:
        return DeployRequest(**fields)
    defaults = DeployRequest()
    set_too = sorted(k for k, v in fields.items() if v != getattr(defaults, k))
    if set_too:
        raise TypeError(f"pass either request= or {', '.join(set_too)}, not both")
    return given


def deploy(
    app: App,
    slot: str,
    *,
    confirm: str | None = None,
    image: str | None = None,
    saved_plan: Plan | None = None,
    take_host: bool = False,
    force: bool = False,
    take_over: bool = False,
    build: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    request: DeployRequest | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Outcome:
    """Roll out to ``slot``. Nothing differs: ``Unchanged``, nothing applied and no
    revision recorded, unless ``force``. With ``build``, the image is built from the app's
    source first (or the one built from the same source reused) and deployed by its pushed
    digest. ``take_over``: objects of the slot's source that someone else owns (a Helm
    release, another field manager) are taken, and said so, instead of refused.
    ``request``: the options as one value (the command line builds one); the keywords are
    its fields."""
    request = _request(
        request,
        image=image,
        saved=saved_plan,
        take_host=take_host,
        force=force,
        take_over=take_over,
        build=build,
        timeout=timeout,
        rollback_timeout=rollback_timeout,
    )
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.deploy(clearance, app, slot, request)


def build(
    app: App,
    slot: str,
    *,
    confirm: str | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Built:
    """Build what a deploy of ``slot`` would run — an image, pushed to the registry
    ``app.image`` names; a local dependency environment — without deploying it. The same
    inputs are never built twice (``Built.reused``)."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.build_only(clearance, app, slot)


def repair(
    app: App,
    slot: str,
    *,
    confirm: str | None = None,
    saved_plan: Plan | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Outcome:
    """Re-assert the deployed release as recorded: only what drifted changes."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.repair(
            clearance,
            app,
            slot,
            saved=saved_plan,
            timeout=timeout,
            rollback_timeout=rollback_timeout,
        )


def rollback(
    app: App,
    slot: str,
    revision: int | None = None,
    *,
    confirm: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Outcome:
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.rollback(
            clearance, app, slot, revision, timeout=timeout, rollback_timeout=rollback_timeout
        )


def restart(
    app: App,
    slot: str,
    process: str | None = None,
    *,
    confirm: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Outcome:
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.restart(
            clearance, app, slot, process, timeout=timeout, rollback_timeout=rollback_timeout
        )


def promote(
    app: App,
    slot: str,
    *,
    confirm: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    source_backend: Backend | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Outcome:
    """Roll the release deployed in ``slot`` to the slot it promotes to, by digest, under
    the destination slot's guard. The live digest must match the recorded one."""
    dest = app.slots.get(slot).promotes_to
    if dest is None:
        raise InputError(f"slot {slot!r} promotes nowhere (hint: set slots.{slot}.promotes_to)")
    clearance = clear(app, dest, confirm, backend)
    source_target = app.slots.target(slot)
    with _backend(app, slot, source_backend) as src:
        deployed = _history.deployed(src.read_records(source_target))
        if deployed is None:
            raise InputError(f"nothing is deployed in slot {slot!r} to promote")
        live = src.live_digest(source_target, deployed)
    if deployed.digest and live != deployed.digest:
        raise InputError(
            f"slot {slot!r} r{deployed.revision} is recorded with {deployed.digest} but "
            f"{live or 'nothing'} is running there; refusing to promote what was not tested "
            f"(hint: redeploy {slot} first)"
        )
    if deployed.digest is None and "@sha256:" not in (deployed.image or ""):
        # never a tag, which may have moved since it was tested: the digest that runs
        if not (live and live.startswith("sha256:")):
            raise InputError(
                f"slot {slot!r} r{deployed.revision} records no image digest and none can be "
                f"read from what runs there; refusing to promote {deployed.image} by its tag "
                f"(hint: deploy {slot} by digest, --image REPO@sha256:..., then promote)"
            )
        deployed = replace(deployed, digest=live)
    ref = deployed.image_ref()
    if ref is None:
        raise InputError(f"slot {slot!r} r{deployed.revision} records no image to promote")
    with _engine(app, dest, backend, reporter) as engine:
        from shipway.engine.request import DeployRequest

        promotion = DeployRequest(
            image=ref,
            operation="promote",
            description=f"promote {slot} r{deployed.revision} ({ref})",
            timeout=timeout,
            rollback_timeout=rollback_timeout,
        )
        return engine.deploy(clearance, app, dest, promotion)


def set_image(
    app: App,
    slot: str,
    workload: str,
    image: str,
    *,
    confirm: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Outcome:
    """Roll ``workload`` (``KIND/NAME[:CONTAINER]``, a Deployment, StatefulSet, DaemonSet or
    CronJob of the slot's namespace that shipway did not render) to ``image``, under the
    slot's guard and lock: its current image is the anchor, put back when the new one
    fails; recorded in the slot's history."""
    from shipway.spec.source import ContainerRef

    ref = ContainerRef.parse(workload)
    if ref is None:
        raise InputError(
            f"{workload!r} is not KIND/NAME[:CONTAINER] (e.g. Deployment/web or "
            "StatefulSet/db:postgres)"
        )
    if not image.strip() or any(c.isspace() for c in image):
        raise InputError(f"{image!r} is not an image reference")
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.set_image(
            clearance, app, slot, ref, image, timeout=timeout, rollback_timeout=rollback_timeout
        )


def stop(
    app: App,
    slot: str,
    *,
    confirm: str | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> None:
    """Stop the slot's processes under its lock. The release records stay, so the deployed
    release is still the anchor: ``deploy`` or ``restart`` brings it back."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        engine.stop(clearance, app, slot)


def leftovers(app: App, slot: str, *, backend: Backend | None = None) -> list[Leftover]:
    """What ``destroy`` would delete in ``slot`` (volumes marked ``data``). Read-only."""
    with _engine(app, slot, backend, None) as engine:
        return engine.leftovers(app, slot)


def destroy(
    app: App,
    slot: str,
    *,
    volumes: bool = False,
    confirm: str | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> list[Leftover]:
    """Delete everything shipway made for the app in ``slot`` — what runs, routes, files,
    snapshots, release records, the lock — and, with ``volumes``, its volumes. ``confirm``
    (the slot's name) is needed on every slot, guarded or not. Returns what was deleted."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.destroy(clearance, app, slot, volumes=volumes)


def backup(
    app: App,
    slot: str,
    accessory: str,
    *,
    out: str | Path | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> BackupFile:
    """Write a consistent backup of ``accessory`` in ``slot`` to ``out`` (a file, or a
    directory; default: the current directory) with its sha256 beside it (``FILE.sha256``).
    Postgres: the server's own major version of pg_dump, custom format; Redis: an RDB
    snapshot after a BGSAVE. A read: the server keeps serving, no lock is taken."""
    with _engine(app, slot, backend, reporter) as engine:
        return engine.backup(app, slot, accessory, Path(out) if out is not None else None)


def restore(
    app: App,
    slot: str,
    accessory: str,
    path: str | Path,
    *,
    confirm: str | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Restored:
    """Put the backup at ``path`` back as ``accessory``'s whole data in ``slot``, once its
    checksum matches the ``.sha256`` beside it (a corrupted file is refused, exit 2, nothing
    touched). ``confirm`` (the slot's name) is needed on every slot."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.restore(clearance, app, slot, accessory, Path(path))


def run(
    app: App,
    slot: str,
    command: Sequence[str],
    *,
    process: str | None = None,
    stdin: bool | None = False,
    tty: bool | None = False,
    host: str | None = None,
    env: Mapping[str, str] | None = None,
    confirm: str | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> int:
    """Run ``command`` once in the deployed release's environment (its files, env, secrets,
    volumes, as ``process`` — default ``web``, else the first — gets them) and return its
    exit code. A one-off command can change production data: it needs the slot's clearance
    like any mutation. ``stdin``/``tty``: pass standard input through, give it a terminal
    (``docker run -i``/``-t``; None: if the backend can); ``host``: the Docker host to run
    it on; ``env``: variables over the release's, for this command only. The command's
    output goes to this process's standard output and error. A SIGTERM or SIGHUP while it
    runs elsewhere (a container, a pod) removes it and returns 128 + the signal's number."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.run_command(
            clearance, app, slot, command, process=process, stdin=stdin, tty=tty, host=host,
            env=env,
        )  # fmt: skip


def logs(
    app: App,
    slot: str,
    process: str | None = None,
    *,
    follow: bool = False,
    lines: int = 50,
    backend: Backend | None = None,
) -> Iterator[str]:
    """The last ``lines`` lines of the slot's process logs (secret values masked); with
    ``follow``, then every new line until the caller stops iterating."""
    if process is not None and process not in app.processes:
        raise InputError(
            f"no process {process!r} in {app.name} (processes: {', '.join(app.processes)})"
        )
    if backend is not None:
        return backend.logs(app.slots.target(slot), process, follow, lines)
    return _logs_then_close(app, slot, process, follow, lines)


def log_view(
    app: App,
    slot: str,
    process: str | None = None,
    *,
    lines: int = 50,
    since: float | None = None,
    release: int | None = None,
    follow: bool = False,
    backend: Backend | None = None,
) -> LogView:
    """What ``shipway logs`` shows: the last ``lines`` lines of every process (or of
    ``process``) interleaved by time, those written since ``since`` (epoch seconds), of what
    runs or of one ``release``, then with ``follow`` every new line; with a line saying
    what they are when it is not simply what runs. A backend that cannot select by time or
    release (``ViewsLogs``) shows what runs; ``since`` and ``release`` are then refused, as
    input errors."""
    query = LogQuery(process, lines, since, release, follow)
    if query.process is not None and query.process not in app.processes:
        raise InputError(
            f"no process {query.process!r} in {app.name} (processes: {', '.join(app.processes)})"
        )
    target = app.slots.target(slot)
    if backend is not None:
        return _view_of(backend, target, query)
    opened = open_backend(app, app.slots.get(slot))
    try:
        view = _view_of(opened, target, query)
    except BaseException:
        opened.close()
        raise

    def then_close() -> Iterator[LogLine]:
        try:
            yield from view.lines
        finally:
            opened.close()

    return LogView(view.about, then_close())


def _view_of(b: Backend, target: Target, query: LogQuery) -> LogView:
    if isinstance(b, ViewsLogs):
        return b.log_view(target, query)
    if query.since is not None or query.release is not None:
        raise InputError(
            f"the {b.name} backend shows the logs of what runs only: it takes no --since or "
            "--release yet"
        )
    lines = b.logs(target, query.process, query.follow, query.lines)
    return LogView(None, (LogLine("", None, line) for line in lines))


def _logs_then_close(
    app: App, slot: str, process: str | None, follow: bool, lines: int
) -> Iterator[str]:
    with _backend(app, slot, None) as b:
        yield from b.logs(app.slots.target(slot), process, follow, lines)


@dataclass(frozen=True)
class SlotStatus:
    app: str
    slot: str
    backend: str
    deployed: Release | None
    processes: list[ProcessStatus]
    volumes: list[VolumeStatus] = field(default_factory=list)
    #: what the slot is doing: running, stopped, deploying (held by …), failed rN …
    state: SlotState = NOTHING
    #: its accessories: health, version, data size (spec/accessories.py)
    accessories: list[AccessoryStatus] = field(default_factory=list)
    #: the certificates its routes are served with (docker: names, issuer, expiry)
    certificates: list[CertificateStatus] = field(default_factory=list)
    #: the freezes that hold it now: kept in its target (shipway freeze) or declared
    freezes: list[Freeze] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "slot": self.slot,
            "backend": self.backend,
            "state": self.state.word,
            "state_line": self.state.line,
            "held_by": self.state.held_by,
            "deployed": self.deployed.summary() if self.deployed else None,
            "processes": [p.to_json() for p in self.processes],
            "volumes": [v.to_json() for v in self.volumes],
            "accessories": [a.to_json() for a in self.accessories],
            "certificates": [c.to_json() for c in self.certificates],
            "freezes": [f.to_json() for f in self.freezes],
        }


def status(app: App, slot: str, *, backend: Backend | None = None) -> SlotStatus:
    target = app.slots.target(slot)
    with _backend(app, slot, backend) as b:
        records = b.read_records(target)
        processes = b.status(target)
        return SlotStatus(
            app=app.name,
            slot=slot,
            backend=target.backend,
            deployed=_history.deployed(records),
            processes=processes,
            volumes=b.volumes(target),
            state=slot_state(records, processes),
            accessories=accessories_of(b).accessories(target) if runs_accessories(b) else [],
            certificates=b.certificates(target) if isinstance(b, ServesCertificates) else [],
            freezes=active(app.slots.get(slot).freeze, kept_freezes(b, target), datetime.now(UTC)),
        )


def recorded_app(app_name: str, slot: str, state_dir: Path | None = None) -> App:
    """The app a local slot last ran, read back from its own records (no spec needed: its
    directory may be gone) — what ``shipway stop SLOT --app NAME`` stops."""
    from shipway.backends.local import listing

    root = (state_dir or listing.default_root()).resolve()
    return listing.recorded_app_or_refuse(root, app_name, slot)


def ls(state_dirs: Sequence[Path] = ()) -> list[SlotStatus]:
    """Every app and slot the local state directories know (default: the one a slot
    without ``state_dir`` uses), each with its status — read from its own records, so no
    spec is needed."""
    from shipway.backends.local import listing

    roots = list(dict.fromkeys(p.resolve() for p in state_dirs)) or [listing.default_root()]
    out: list[SlotStatus] = []
    for root in roots:
        for app_name, slot_name in listing.known(root):
            app = listing.recorded_app(root, app_name, slot_name)
            if app is None:
                why = f"its records (in {root}) hold no spec this version of shipway reads"
                unknown = SlotState("unknown", why)
                out.append(SlotStatus(app_name, slot_name, "local", None, [], state=unknown))
            else:
                out.append(status(app, slot_name))
    return out


def history(app: App, slot: str, *, backend: Backend | None = None) -> list[Release]:
    with _backend(app, slot, backend) as b:
        return _history.ordered(b.read_records(app.slots.target(slot)))


# -- generations (blue/green slots) ----------------------------------------------------


def generations(app: App, slot: str, *, backend: Backend | None = None) -> list[GenerationInfo]:
    """The slot's generations, oldest first, with their release and state (live/asleep)."""
    with _engine(app, slot, backend, None) as engine:
        return engine.generations(app, slot)


def switch(
    app: App,
    slot: str,
    generation: str,
    *,
    confirm: str | None = None,
    take_host: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> Outcome:
    """Switch the slot to a kept generation: wake → wait → point → drop → sleep the old."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.switch_to(
            clearance,
            app,
            slot,
            generation,
            take_host=take_host,
            timeout=timeout,
            rollback_timeout=rollback_timeout,
        )


def sleep(
    app: App,
    slot: str,
    generation: str,
    *,
    confirm: str | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> None:
    """Put a generation that is not live to sleep (scaled to zero, kept)."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        engine.sleep(clearance, app, slot, generation)


def wake(
    app: App,
    slot: str,
    generation: str,
    *,
    confirm: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> None:
    """Wake an asleep generation and wait until it is ready; no traffic moves."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        engine.wake(clearance, app, slot, generation, timeout)


def gc(
    app: App,
    slot: str,
    keep: int,
    *,
    confirm: str | None = None,
    backend: Backend | None = None,
    reporter: Reporter | None = None,
) -> list[str]:
    """Delete asleep generations beyond the ``keep`` newest; never the live one."""
    with _cleared(app, slot, confirm, backend, reporter) as (clearance, engine):
        return engine.gc(clearance, app, slot, keep)


# -- Helm releases already in a cluster (read natively: no helm binary) -----------------


def helm_release(
    release: str,
    *,
    context: str | None = None,
    namespace: str | None = None,
    chart: str | None = None,
) -> HelmRelease:
    """The highest *deployed* revision of a Helm release (never a newer failed or pending
    one), from Helm's own release Secrets; ``chart`` picks one chart's revisions where
    several charts share the namespace."""
    from shipway.backends.kubernetes.client import make_client
    from shipway.backends.kubernetes.helm import read_deployed

    client = make_client(context, namespace)
    found = read_deployed(client, release, chart=chart)
    return replace(found, namespace=found.namespace or client.namespace)


def helm_history(
    release: str, *, context: str | None = None, namespace: str | None = None
) -> tuple[str, list[HelmRelease]]:
    """Every revision of a Helm release, oldest first, and the namespace it was read in."""
    from shipway.backends.kubernetes.client import make_client
    from shipway.backends.kubernetes.helm import read_history

    client = make_client(context, namespace)
    return str(client.namespace), read_history(client, release)
