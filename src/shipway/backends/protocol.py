"""The one interface every backend implements, and the small types it speaks.

A backend does I/O only: it renders (purely) what a release means on its engine, observes
what runs, keeps release records and the slot's lock in the target itself, and performs
ONE step at a time when the engine asks. It never decides what to do next.

Every mutating method takes a :class:`~shipway.guard.Clearance` and must call
``clearance.require_covers(target)`` before touching anything.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from shipway.backends.liveness import ProcessMark
from shipway.backends.liveness import pid_alive as pid_alive  # the local lock names it here
from shipway.backends.logs import LogQuery, LogView
from shipway.backends.volume_status import VolumeStatus
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.plan.model import (
    DropHost,
    Observed,
    Plan,
    PointHost,
    Remove,
    Scale,
    SetImage,
    WaitImage,
    WaitReplicas,
    WaitRollout,
)
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import BuildKind, ImageMeta, Release
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Masker, Secret
from shipway.spec.source import ContainerRef


class Reporter(Protocol):
    """Where engine and backends send what a user should see while they work."""

    def line(self, text: str) -> None: ...

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None: ...


class NullReporter:
    def line(self, text: str) -> None:
        pass

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None:
        pass


class MaskingReporter:
    """A reporter that masks secret values in everything it passes on: for output a
    backend streams from an engine it does not control (a build's log)."""

    def __init__(self, inner: Reporter, mask: Masker) -> None:
        self.inner = inner
        self.mask = mask

    def line(self, text: str) -> None:
        self.inner.line(self.mask(text))

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None:
        self.inner.progress(process, counts, self.mask(note))


class Reason:
    """The ``Failure.reason`` values shipway itself gives, one vocabulary for every backend.
    An engine's own reasons (Kubernetes' ``CrashLoopBackOff``, ``ErrImagePull``,
    ``OOMKilled`` …) pass through as the engine names them."""

    CRASHED = "Crashed"  #: a process or container exited while it was starting
    OOM_KILLED = "OOMKilled"  #: killed for memory (Docker's State.OOMKilled, the kubelet's)
    HEALTHCHECK_FAILED = "HealthcheckFailed"  #: its health check failed all its attempts
    NOT_STARTED = "NotStarted"  #: what should run is not known to its supervisor or engine
    NOT_SCALED = "NotScaled"  #: a generation could not be brought to its replicas
    NOT_FOUND = "NotFound"  #: what a wait needs is gone
    TIMEOUT = "Timeout"  #: not ready (or not finished) before the deadline
    RELEASE_COMMAND_FAILED = "ReleaseCommandFailed"
    RELEASE_COMMAND_TIMEOUT = "ReleaseCommandTimeout"
    BUILD_FAILED = "BuildFailed"  #: the build phase failed; nothing new started
    STEP_FAILED = "StepFailed"  #: a step's engine call failed (the message says which)
    UNDO_FAILED = "UndoFailed"  #: an undo could not be planned or walked
    ENGINE_UNAVAILABLE = "EngineUnavailable"  #: the engine did not answer
    CANARY_ABORTED = "CanaryAborted"  #: the canary's analysis (or a person) aborted it
    CANARY_INCONCLUSIVE = "CanaryInconclusive"  #: too little traffic until its time limit


@dataclass(frozen=True)
class Failure:
    """Why a rollout step failed, with what a user needs to act: reason, message, last exit
    code, and details (recent events, a log tail)."""

    reason: str
    message: str
    process: str | None = None
    exit_code: int | None = None
    details: tuple[str, ...] = ()

    def headline(self) -> str:
        who = f"{self.process}: " if self.process else ""
        code = ""
        said = re.compile(rf"\b(exit code|exited with code|with code) {self.exit_code}\b")
        if self.exit_code is not None and not said.search(self.message):
            code = f" (exit code {self.exit_code})"  # said once: never when the message has it
        return f"{who}{self.reason}: {self.message}{code}"

    def lines(self) -> list[str]:
        return [self.headline(), *(f"  {d}" for d in self.details)]

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "message": self.message,
            "process": self.process,
            "exit_code": self.exit_code,
            "details": list(self.details),
        }


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or wants) a slot's lock, and until when it is valid unless renewed.
    ``boot``, ``pid_ns`` and ``start`` mark its process beyond host and pid
    (:class:`~shipway.backends.liveness.ProcessMark`): what can prove it gone."""

    holder: str
    host: str
    pid: int
    since: str
    ttl: float = 60.0
    boot: str = ""
    pid_ns: str = ""
    start: str = ""

    @classmethod
    def me(cls, ttl: float = 60.0) -> LockHolder:
        mark = ProcessMark.mine()
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = str(os.getuid())
        return cls(
            holder=f"{user}@{mark.host} (pid {mark.pid})",
            host=mark.host,
            pid=mark.pid,
            since=datetime.now(UTC).isoformat(timespec="seconds"),
            ttl=ttl,
            boot=mark.boot,
            pid_ns=mark.pid_ns,
            start=mark.start,
        )

    def mark(self) -> ProcessMark:
        return ProcessMark(self.host, self.pid, self.boot, self.pid_ns, self.start)

    def expires(self, renewed: datetime | None = None) -> str:
        start = renewed or datetime.fromisoformat(self.since)
        return (start + timedelta(seconds=self.ttl)).isoformat(timespec="seconds")

    def to_json(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "host": self.host,
            "pid": self.pid,
            "since": self.since,
            "ttl": self.ttl,
            "boot": self.boot,
            "pid_ns": self.pid_ns,
            "start": self.start,
        }


@dataclass(frozen=True)
class ResolvedImage:
    """What will run: a reference, its digest when known, and its metadata when the image
    could be inspected or read from its registry (None: the engine falls back to the
    recorded release, then to the spec's ``image_type``)."""

    ref: str
    digest: str | None = None
    meta: ImageMeta | None = None
    #: when ``meta`` is None: why the image could not be read (the registry's answer)
    unknown_because: str = ""
    #: database files (relative paths) a release copies from the app's directory: each
    #: deploy replaces the running release's copy of them (the plan warns)
    databases: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildInputs:
    """What a release's build phase would make, read without building anything.

    ``what`` names the artifact (an image's content-addressed tag, known before the build;
    an environment's directory); ``inputs`` is the content digest of what it is built from,
    and ``source`` says what that is. ``reuse``: an artifact of exactly these inputs exists
    (its ``digest`` and ``meta`` are then known at plan time)."""

    kind: BuildKind
    what: str
    inputs: str
    source: str
    reuse: bool = False
    digest: str | None = None
    meta: ImageMeta | None = None


@dataclass(frozen=True)
class Built:
    """What a build made (or found, when ``reused``): ``result`` is the image digest (the
    pushed manifest's) or the environment's id; ``meta`` is read from the built image
    itself (None for an environment)."""

    kind: BuildKind
    what: str
    inputs: str
    source: str
    result: str
    meta: ImageMeta | None = None
    reused: bool = False
    duration: float = 0.0


@dataclass(frozen=True)
class OneOffCommand:
    """A one-off command (``shipway run``): the words to run, as which process of the
    deployed release, and how it is attached. ``stdin``: this process's standard input is
    passed through (``-i``); ``tty``: the command gets a terminal (``-t``) — each True when
    asked for (a backend that cannot must refuse), None when wanted if the backend can (the
    default on a terminal), False when not. ``host``: the Docker host to run it on (None:
    the first that runs the process). ``env``: variables set over the release's for this
    command only (``-e KEY=VALUE``; ``TERM`` of the caller's terminal when it gets one)."""

    command: tuple[str, ...]
    process: str
    stdin: bool | None = False
    tty: bool | None = False
    host: str | None = None
    env: tuple[tuple[str, str], ...] = ()

    @property
    def attached(self) -> bool:
        """Standard input is to be passed through (asked for, or wanted)."""
        return self.stdin is not False

    @property
    def terminal(self) -> bool:
        """The command is to get a terminal (asked for, or wanted)."""
        return self.tty is not False


@dataclass(frozen=True)
class ProcessStatus:
    process: str
    desired: int
    ready: int
    generation: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "process": self.process,
            "desired": self.desired,
            "ready": self.ready,
            "generation": self.generation,
            **dict(self.detail),
        }


@dataclass(frozen=True)
class GenerationInfo:
    """One generation of a slot. ``state``: ``live`` (the slot's hosts point at it),
    ``awake`` (running without traffic, e.g. after ``wake``), ``asleep`` (scaled to zero,
    kept). ``gc`` deletes asleep generations only."""

    name: str
    state: Literal["live", "awake", "asleep"]
    release: int | None
    created_at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "release": self.release,
            "created_at": self.created_at,
        }


@dataclass(frozen=True)
class HostOwner:
    """Who serves a host name today: an app's slot (and generation), found in the target."""

    app: str
    slot: str
    generation: str | None = None
    where: str = ""

    def __str__(self) -> str:
        gen = f" generation {self.generation}" if self.generation else ""
        at = f" ({self.where})" if self.where else ""
        return f"{self.app}/{self.slot}{gen}{at}"


@dataclass(frozen=True)
class Leftover:
    """One thing shipway made for an app in a slot, as ``destroy`` lists it. ``data``:
    a volume, deleted only with ``--volumes``."""

    kind: str
    name: str
    data: bool = False

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "data": self.data}


# -- the protocol, in small named parts ------------------------------------------------
#
# A backend is composed of these (Helm's storage driver is four tiny interfaces, likewise).
# Each backend module states its conformance in one line mypy checks, e.g.
# ``_: type[GenerationBackend] = LocalBackend``, so a missing method fails ``mypy --strict``
# rather than a test at run time.


class Renders(Protocol):
    """Pure: what a release means on this engine."""

    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        """What ``release`` of ``app`` means on this engine. Pure: no I/O, no subprocess.
        Secret values appear only as placeholders."""
        ...


class Reads(Protocol):
    """What a backend reads from its target. Nothing here mutates anything."""

    def resolve_image(self, target: Target, app: App, ref: str | None) -> ResolvedImage: ...

    def observe(self, target: Target) -> Observed:
        """Units that live in the target now (the engine adds the records' head)."""
        ...

    def read_records(self, target: Target) -> list[Release]: ...

    def status(self, target: Target) -> list[ProcessStatus]: ...

    def diff(self, target: Target, plan: Plan) -> list[str]:
        """Optional detail for ``shipway plan``: how live objects would change. Read-only;
        secret data masked."""
        ...

    def logs(
        self, target: Target, process: str | None, follow: bool, lines: int
    ) -> Iterator[str]: ...

    def live_digest(self, target: Target, release: Release) -> str | None:
        """The digest actually running for ``release`` (promotion checks it)."""
        ...


class Records(Protocol):
    """The release records the target itself keeps (each call requires a clearance)."""

    def write_records(
        self, clearance: Clearance, target: Target, records: Sequence[Release]
    ) -> None: ...

    def delete_records(
        self, clearance: Clearance, target: Target, revisions: Sequence[int]
    ) -> None: ...


class Locks(Protocol):
    """The slot's lock, kept in the target."""

    def lock(
        self, clearance: Clearance, target: Target, holder: LockHolder, reporter: Reporter
    ) -> AbstractContextManager[None]:
        """Hold the slot's lock for the block; renew it while held; release it on every
        exit path. Break an expired (or dead-holder) lock with a line naming its holder;
        otherwise raise SlotLocked."""
        ...


class Steps(Protocol):
    """The steps of a rolling plan, one at a time (each mutation requires a clearance)."""

    def apply(
        self,
        clearance: Clearance,
        target: Target,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None: ...

    def remove(
        self, clearance: Clearance, target: Target, step: Remove, reporter: Reporter
    ) -> None: ...

    def wait(
        self,
        target: Target,
        step: WaitRollout,
        artifact: Artifact,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        """Block until the units are ready (→ None), fail fast with the reason, or time out
        at ``deadline`` (time.monotonic())."""
        ...

    def run_release_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        command: Sequence[str],
        secrets: Mapping[str, Secret],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None: ...

    def stop(self, clearance: Clearance, target: Target, reporter: Reporter) -> None: ...


class Builds(Protocol):
    """The build phase: what a release builds before anything new starts."""

    def build_inputs(
        self, target: Target, app: App, ref: str | None, image: bool
    ) -> BuildInputs | None:
        """What a build for ``app`` would make here and from which inputs, and whether it
        exists already. Read-only: nothing is built, pushed or written, no subprocess runs.
        ``ref``: the image (or local snapshot) the deploy runs when one is given (a
        promotion): an image is then never rebuilt, a local environment is made for that
        snapshot's dependencies. ``image``: an image build was asked for (``--build``,
        ``shipway build``). None: nothing to build."""
        ...

    def build(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        inputs: BuildInputs,
        reporter: Reporter,
    ) -> Built:
        """Build what ``inputs`` names (or confirm the existing one when it is reused),
        streaming progress to ``reporter``, and put it where the release will use it (a
        registry, the slot's environments). Never touches what runs. Raises BuildFailed with
        the log's last lines."""
        ...


@runtime_checkable
class ViewsLogs(Protocol):
    """A backend that selects log lines by time and by release (the local one): what
    ``logs --since`` and ``--release`` need. Others answer ``Reads.logs`` only."""

    def log_view(self, target: Target, query: LogQuery) -> LogView: ...


class RunsCommands(Protocol):
    """One-off commands in a deployed release's environment (``shipway run``)."""

    def run_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        oneoff: OneOffCommand,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> int:
        """Run ``oneoff`` once in ``release``'s environment — its files, env, secrets and
        volumes, as ``oneoff.process`` gets them — and return the command's exit code
        (128 + N when a signal N ended it). The command's own output goes to this process's
        standard output and error unmasked (it is the user's); what the backend itself says
        goes to ``reporter``, masked. Whatever it made for the command (a container, a pod)
        is removed on every path."""
        ...


class RuntimeFiles(Protocol):
    """What a release wrote inside its own copy of the app while it ran."""

    def runtime_files(self, target: Target, release: Release) -> list[str] | None:
        """Paths (relative to the app's directory) that ``release`` created or changed at
        run time inside its own snapshot or container — not part of its recorded content,
        not under a volume, not a config file shipway wrote. They are lost to the next
        release. Read-only. None: this backend cannot tell."""
        ...


class Closes(Protocol):
    """What a backend holds open (watch threads, connections, SSH sessions) ends here. The
    API closes every backend it opens; closing twice is harmless."""

    def close(self) -> None: ...


class Hosts(Protocol):
    """The host names a slot serves, and who else serves them: the engine refuses a host
    another app or slot serves unless told to take it (``--take-host``), on every backend
    and strategy."""

    def hosts(self, app: App, slot: Slot) -> list[tuple[str, str]]:
        """Pure: the (host name, process) pairs ``app`` serves in ``slot``."""
        ...

    def host_owner(self, target: Target, host: str) -> HostOwner | None:
        """Who serves ``host`` now, in the whole target (other apps and slots included).
        Read-only."""
        ...


class Generations(Protocol):
    """What a blue-green backend adds: whole generations side by side, scaled, waited on,
    and hosts moved between them (the :class:`~shipway.plan.model.GenerationStep` s).

    A generation's units carry its name (``Unit.generation``); ``Scale``/``WaitReplicas``
    steps name the generation; ``PointHost``/``DropHost`` move host names between them.
    """

    def generations(self, target: Target) -> list[GenerationInfo]:
        """Every generation of this app in this slot, oldest first; at most one is live."""
        ...

    def delete_generation(
        self, clearance: Clearance, target: Target, generation: str, reporter: Reporter
    ) -> None: ...

    def scale(
        self, clearance: Clearance, target: Target, step: Scale, reporter: Reporter
    ) -> None: ...

    def wait_replicas(
        self, target: Target, step: WaitReplicas, deadline: float, reporter: Reporter
    ) -> Failure | None: ...

    def point_host(
        self, clearance: Clearance, target: Target, step: PointHost, reporter: Reporter
    ) -> None: ...

    def drop_host(
        self, clearance: Clearance, target: Target, step: DropHost, reporter: Reporter
    ) -> None:
        """Best effort: raise CleanupFailed with the manual fix when it cannot be done."""
        ...


class Sources(Protocol):
    """What a backend adds whose slots may take their objects from a source (the team's
    manifests, a chart) and whose namespace holds workloads shipway did not render
    (``set-image``): Kubernetes. ``render`` reads the source for such a slot."""

    def undeployable(self, app: App, slot: Slot) -> str | None:
        """Why a deploy cannot render ``slot``'s objects here (its source is only a
        declaration: a chart without Helm's SDK), with the fix; None when it can."""
        ...

    def claim(
        self, target: Target, artifact: Artifact, take_over: bool, reporter: Reporter
    ) -> None:
        """Read-only, before anything is applied: refuse (InputError) objects of
        ``artifact`` the cluster has no kind for, cluster-scoped ones the slot does not
        allow, and ones another manager owns — those unless ``take_over``, which says whose
        they were instead (and lets the apply take them)."""
        ...

    def workload_image(self, target: Target, ref: ContainerRef) -> tuple[str, str]:
        """(container, image) that ``ref``'s container runs now: set-image's anchor."""
        ...

    def set_image(
        self, clearance: Clearance, target: Target, step: SetImage, reporter: Reporter
    ) -> None: ...

    def wait_image(
        self, target: Target, step: WaitImage, deadline: float, reporter: Reporter
    ) -> Failure | None: ...


class Volumes(Protocol):
    """The slot's volumes: data that belongs to the app and slot, not to a release."""

    def volume_notes(self, app: App, slot: Slot, plan: Plan) -> list[str]:
        """Pure: what a plan cannot promise because of the volumes its processes mount
        (``not zero-downtime: web mounts ReadWriteOnce volume data``)."""
        ...

    def volumes(self, target: Target) -> list[VolumeStatus]:
        """Read-only: every volume the slot declares or still holds, with its size on
        disk where the engine can tell."""
        ...


class Destroys(Protocol):
    """Removing everything shipway made for the app in the slot (``shipway destroy``)."""

    def leftovers(self, target: Target) -> list[Leftover]:
        """Read-only: what a destroy would delete, volumes included (marked ``data``)."""
        ...

    def destroy(
        self, clearance: Clearance, target: Target, volumes: bool, reporter: Reporter
    ) -> list[Leftover]:
        """Delete what runs, its routes, files, snapshots and records (and, with
        ``volumes``, the volumes) under the slot's lock; the lock itself goes as the lock
        is let go. Returns what was deleted."""
        ...


@runtime_checkable
class Drifts(Protocol):
    """What a backend adds whose target can be changed outside shipway in ways ``observe``
    does not see (Kubernetes: ``kubectl edit`` or ``kubectl scale`` leave shipway's digest
    annotation as it was). The engine asks before it answers "no changes", so that answer
    is never given for a target that no longer runs what its record says."""

    def altered(self, target: Target, release: Release, secrets: Mapping[str, Secret]) -> list[str]:
        """Keys of ``release``'s units that the target no longer runs as recorded: those
        that applying the recorded unit again would change (a server-side dry run against
        the live object). Read-only; ``secrets`` only to compare, never shown."""
        ...


@runtime_checkable
class FansOut(Protocol):
    """What a backend adds whose hosts are independent engines (Docker): the engine may
    give it the same step for several hosts at once, each in a thread of its own. Every
    step on one host still comes in plan order; a failure on one host is the walk's
    failure as before (the other hosts' steps under way are let finish, then undone)."""

    def fan_out(self) -> int:
        """How many hosts' steps may run at once (1: one at a time)."""
        ...


@runtime_checkable
class Backend(
    Renders,
    Reads,
    Records,
    Locks,
    Steps,
    Builds,
    RunsCommands,
    RuntimeFiles,
    Closes,
    Volumes,
    Destroys,
    Hosts,
    Protocol,
):
    """Every backend: renders, reads, keeps records and the lock, builds, performs rolling
    steps, runs one-off commands, tells what a release wrote inside itself, keeps volumes,
    can be told to destroy what it made, and says who serves a host."""

    name: str


@runtime_checkable
class GenerationBackend(Backend, Generations, Protocol):
    """A backend that also keeps generations (blue/green): local and Kubernetes."""


@runtime_checkable
class SourceBackend(Backend, Sources, Protocol):
    """A backend whose slots may take their objects from a source: Kubernetes."""


def sources_of(backend: Backend) -> SourceBackend:
    """The backend as one with sources and workloads of its own, or an InputError."""
    if not isinstance(backend, SourceBackend):
        raise InputError(
            f"the {backend.name} backend takes no manifests or charts and has no workloads "
            "of its own (hint: use a kubernetes slot)"
        )
    return backend


def generations_of(backend: Backend) -> GenerationBackend:
    """The backend as a blue-green one, or an InputError saying it keeps no generations."""
    if not isinstance(backend, GenerationBackend):
        raise InputError(
            f"the {backend.name} backend does not keep generations "
            '(hint: use strategy = "rolling" for this slot)'
        )
    return backend


def fan_out_of(backend: Backend) -> int:
    """How many hosts' steps the backend takes at once (1 unless it :class:`FansOut`)."""
    return max(1, backend.fan_out()) if isinstance(backend, FansOut) else 1


def drifts_of(backend: Backend) -> Drifts | None:
    """The backend as one that can find out-of-band changes, or None (its ``observe``
    already sees every change: the local backend's files, Docker's labelled bodies)."""
    return backend if isinstance(backend, Drifts) else None


@runtime_checkable
class PrunesImages(Protocol):
    """What a backend adds that keeps images on its hosts (Docker): after a successful
    deploy, the app's images no release within ``history_limit`` needs are removed."""

    def prune_images(
        self,
        clearance: Clearance,
        target: Target,
        keep: Sequence[Release],
        dropped: Sequence[Release],
    ) -> tuple[list[str], list[str]]:
        """Remove the app's images that no record in ``keep`` names (and those ``dropped``
        named); returns the lines saying what was freed, and the problems met."""
        ...


def image_pruner_of(backend: Backend) -> PrunesImages | None:
    """The backend as one that prunes the images on its hosts, or None."""
    return backend if isinstance(backend, PrunesImages) else None


@runtime_checkable
class ReportsRetries(Protocol):
    """A backend whose edge retries transient engine faults (the shared policy,
    :mod:`shipway.backends.retry`) says each retry to the reporter it is given here — the
    operation's, so the retries show among its progress lines, never silently."""

    def report_retries(self, reporter: Reporter) -> None: ...


def report_retries_to(backend: Backend, reporter: Reporter) -> None:
    """Let ``backend`` say its retries to ``reporter`` (a backend that never retries has
    nothing to say)."""
    if isinstance(backend, ReportsRetries):
        backend.report_retries(reporter)
