"""An in-memory backend, used ONLY by the engine's sequencing tests.

It records every call in order (``calls``) so tests can assert what happened when: that
the anchor was read before any mutation, that nothing at all was called with a clearance
for another slot, that a dry run called nothing that mutates. Failures are scripted:
images that never become ready, a broken engine, a route that cannot be dropped.
It is not selectable from a spec; every real backend is tested against its real engine.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from shipway.backends.imagemeta import repository_of
from shipway.backends.protocol import (
    BuildInputs,
    Built,
    Failure,
    GenerationBackend,
    GenerationInfo,
    HostOwner,
    Leftover,
    LockHolder,
    OneOffCommand,
    ProcessStatus,
    Reason,
    Reporter,
    ResolvedImage,
)
from shipway.backends.volume_status import VolumeStatus
from shipway.errors import BackendError, BuildFailed, CleanupFailed, SlotLocked
from shipway.guard import Clearance
from shipway.plan.model import (
    DropHost,
    Observed,
    ObservedUnit,
    Plan,
    PointHost,
    Remove,
    Scale,
    UnitState,
    WaitReplicas,
    WaitRollout,
)
from shipway.release.artifact import DATA_KINDS, PREREQUISITE, ROUTING, WORKLOAD, Artifact, Unit
from shipway.release.model import ImageMeta, Release
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Secret, placeholder, reveal

MUTATING = frozenset(
    {
        "lock",
        "write_records",
        "delete_records",
        "apply",
        "remove",
        "run_release_command",
        "run_command",
        "scale",
        "point_host",
        "drop_host",
        "stop",
        "delete_generation",
        "build",
        "destroy",
    }
)


@dataclass
class _Live:
    unit: Unit
    state: UnitState = "running"
    revealed: Mapping[str, object] = field(default_factory=dict)


class MemoryBackend:
    name = "memory"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.live: dict[str, _Live] = {}
        self.records: dict[int, Release] = {}
        self.lock_holder: LockHolder | None = None
        self.lock_taken_at: float = 0.0
        self.images: dict[str, ResolvedImage] = {}
        self.doomed_images: set[str] = set()
        self.broken = False
        self.failing_release_command = False
        self.undroppable_hosts: set[str] = set()
        self.unpointable_hosts: set[str] = set()
        self.doomed_generations: set[str] = set()
        self.foreign_hosts: dict[str, HostOwner] = {}
        self.generation_created: dict[str, str] = {}
        self.routes: dict[str, str | None] = {}
        self.replicas: dict[tuple[str, str | None], int] = {}
        self.on_call: dict[str, Callable[[], None]] = {}  # method -> hook run when called
        #: the app's "source": when set, a --build deploy builds an image from it
        self.build_source: str | None = None
        #: a build fails with this log (its last lines are the failure's details)
        self.failing_build_log: tuple[str, ...] | None = None
        self.built: dict[str, str] = {}  # inputs digest -> image digest (the "registry")
        self.command_exit_code = 0  # what a one-off command exits with
        self.runtime_files_of: dict[int, list[str]] = {}  # revision -> what it wrote inside

    def _note(self, method: str, detail: str = "") -> None:
        self.calls.append((method, detail))
        hook = self.on_call.get(method)
        if hook is not None:
            hook()

    def mutations(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] in MUTATING]

    def close(self) -> None:
        self._note("close")

    # -- pure ----------------------------------------------------------------------
    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        gen = release.generation
        prefix = f"gen/{gen}/" if gen else ""
        units = [
            Unit(
                key=f"{prefix}config/{app.name}",
                kind="config",
                phase=PREREQUISITE,
                generation=gen,
                body={"env": dict(app.env), "secrets": {n: placeholder(n) for n in app.secrets}},
            )
        ]
        for volume in app.volumes.values():  # the slot's, in every generation
            units.append(
                Unit(
                    key=f"volume/{volume.name}",
                    kind="volume",
                    phase=PREREQUISITE,
                    body={"name": volume.name},
                )
            )
        for name, process in app.processes.items():
            units.append(
                Unit(
                    key=f"{prefix}workload/{name}",
                    kind="workload",
                    process=name,
                    generation=gen,
                    phase=WORKLOAD,
                    waits=True,
                    switches=True,
                    body={
                        "image": release.image,
                        **({"digest": release.digest} if release.digest else {}),
                        "command": list(process.command or ()),
                        "replicas": process.replicas,
                        "deployment_id": release.deployment_ids.get(name),
                        "config_hash": release.config_hash,
                    },
                )
            )
        for route in () if gen else app.routes:  # generations are routed by PointHost
            units.append(
                Unit(
                    key=f"route/{route.host}",
                    kind="route",
                    process=route.process,
                    phase=ROUTING,
                    switches=True,
                    body={"host": route.host, "process": route.process},
                )
            )
        return Artifact(tuple(units))

    # -- reading -------------------------------------------------------------------
    def resolve_image(self, target: Target, app: App, ref: str | None) -> ResolvedImage:
        self._note("resolve_image", str(ref))
        chosen = ref or app.image or "memory/app:latest"
        return self.images.get(chosen, ResolvedImage(chosen, None, ImageMeta("dockerfile")))

    def observe(self, target: Target) -> Observed:
        self._note("observe")
        units = [
            ObservedUnit(
                key=k,
                kind=v.unit.kind,
                digest=v.unit.digest,
                state=v.state,
                process=v.unit.process,
                phase=v.unit.phase,
                generation=v.unit.generation,
            )
            for k, v in self.live.items()
        ]
        return Observed.of(units)

    def read_records(self, target: Target) -> list[Release]:
        self._note("read_records")
        return [self.records[k] for k in sorted(self.records)]

    def status(self, target: Target) -> list[ProcessStatus]:
        self._note("status")
        return [
            ProcessStatus(process=v.unit.process or k, desired=1, ready=1)
            for k, v in self.live.items()
            if v.unit.kind == "workload"
        ]

    def diff(self, target: Target, plan: Plan) -> list[str]:
        self._note("diff")
        return []

    def logs(self, target: Target, process: str | None, follow: bool, lines: int) -> Iterator[str]:
        self._note("logs")
        return iter(())

    def live_digest(self, target: Target, release: Release) -> str | None:
        self._note("live_digest")
        return release.digest

    # -- mutating ------------------------------------------------------------------
    @contextmanager
    def lock(
        self, clearance: Clearance, target: Target, holder: LockHolder, reporter: Reporter
    ) -> Iterator[None]:
        clearance.require_covers(target)
        self._note("lock")
        current = self.lock_holder
        if current is not None:
            if time.monotonic() - self.lock_taken_at < current.ttl:
                raise SlotLocked(target.slot, current.holder, current.since, current.expires())
            reporter.line(f"broke an expired lock held by {current.holder} since {current.since}")
        self.lock_holder, self.lock_taken_at = holder, time.monotonic()
        try:
            yield
        finally:
            self.lock_holder = None
            self._note("unlock")

    def write_records(
        self, clearance: Clearance, target: Target, records: Sequence[Release]
    ) -> None:
        clearance.require_covers(target)
        self._note("write_records", ",".join(f"r{r.revision}:{r.status}" for r in records))
        for r in records:
            self.records[r.revision] = r

    def delete_records(
        self, clearance: Clearance, target: Target, revisions: Sequence[int]
    ) -> None:
        clearance.require_covers(target)
        self._note("delete_records", ",".join(map(str, revisions)))
        for n in revisions:
            self.records.pop(n, None)

    def apply(
        self,
        clearance: Clearance,
        target: Target,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None:
        clearance.require_covers(target)
        self._note("apply", f"{action} {unit.key}")
        if self.broken:
            raise BackendError(f"engine unavailable while applying {unit.key}")
        if unit.generation:
            self.generation_created.setdefault(unit.generation, f"{len(self.calls):06d}")
        self.live[unit.key] = _Live(unit=unit, revealed=reveal(unit.body, secrets))

    def remove(
        self, clearance: Clearance, target: Target, step: Remove, reporter: Reporter
    ) -> None:
        clearance.require_covers(target)
        self._note("remove", step.unit)
        self.live.pop(step.unit, None)

    def wait(
        self,
        target: Target,
        step: WaitRollout,
        artifact: Artifact,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        self._note("wait", step.process)
        if self.broken:
            return Failure(
                reason=Reason.ENGINE_UNAVAILABLE, message="no answer", process=step.process
            )
        for key in step.units:
            image = artifact.get(key).body.get("image")
            if image in self.doomed_images:
                return Failure(
                    reason="CrashLoopBackOff",
                    message=f"{image} keeps crashing",
                    process=step.process,
                    exit_code=1,
                    details=("log: boom",),
                )
        return None

    def run_release_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        command: Sequence[str],
        secrets: Mapping[str, Secret],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        clearance.require_covers(target)
        self._note("run_release_command", " ".join(command))
        if self.failing_release_command:
            return Failure(reason=Reason.RELEASE_COMMAND_FAILED, message="exit 3", exit_code=3)
        return None

    def run_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        oneoff: OneOffCommand,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> int:
        clearance.require_covers(target)
        self._note(
            "run_command", f"r{release.revision} {oneoff.process}: {' '.join(oneoff.command)}"
        )
        return self.command_exit_code

    def runtime_files(self, target: Target, release: Release) -> list[str] | None:
        self._note("runtime_files", f"r{release.revision}")
        return self.runtime_files_of.get(release.revision)

    def scale(self, clearance: Clearance, target: Target, step: Scale, reporter: Reporter) -> None:
        clearance.require_covers(target)
        self._note("scale", f"{step.generation}/{step.process}={step.replicas}")
        self.replicas[(step.process, step.generation)] = step.replicas

    def wait_replicas(
        self, target: Target, step: WaitReplicas, deadline: float, reporter: Reporter
    ) -> Failure | None:
        self._note("wait_replicas", f"{step.generation}/{step.process}")
        if step.generation in self.doomed_generations:
            return Failure(
                reason="NeverReady", message="readiness probe failing", process=step.process
            )
        return None

    def point_host(
        self, clearance: Clearance, target: Target, step: PointHost, reporter: Reporter
    ) -> None:
        clearance.require_covers(target)
        self._note("point_host", f"{step.host}->{step.generation}")
        if step.host in self.unpointable_hosts:
            raise BackendError(f"the engine refused to point {step.host}")
        self.routes[step.host] = step.generation

    def drop_host(
        self, clearance: Clearance, target: Target, step: DropHost, reporter: Reporter
    ) -> None:
        clearance.require_covers(target)
        self._note("drop_host", f"{step.host}-x-{step.generation}")
        if step.host in self.undroppable_hosts:
            raise CleanupFailed(
                f"route {step.host} of generation {step.generation} could not be removed",
                f"delete the route for {step.host} in generation {step.generation} by hand",
            )

    # -- generations -----------------------------------------------------------------
    def hosts(self, app: App, slot: Slot) -> list[tuple[str, str]]:
        return [(r.host, r.process) for r in app.routes]

    def generations(self, target: Target) -> list[GenerationInfo]:
        self._note("generations")
        routed = set(self.routes.values())
        records = sorted(self.records.values(), key=lambda r: r.revision)
        out = []
        for name, created in sorted(self.generation_created.items(), key=lambda kv: kv[1]):
            release = next((r.revision for r in reversed(records) if r.generation == name), None)
            out.append(
                GenerationInfo(
                    name=name,
                    state="live" if name in routed else "asleep",
                    release=release,
                    created_at=created,
                )
            )
        return out

    def host_owner(self, target: Target, host: str) -> HostOwner | None:
        self._note("host_owner", host)
        if host in self.foreign_hosts:
            return self.foreign_hosts[host]
        gen = self.routes.get(host)
        return HostOwner(target.app, target.slot, gen) if gen else None

    def delete_generation(
        self, clearance: Clearance, target: Target, generation: str, reporter: Reporter
    ) -> None:
        clearance.require_covers(target)
        self._note("delete_generation", generation)
        self.live = {k: v for k, v in self.live.items() if v.unit.generation != generation}
        self.generation_created.pop(generation, None)

    def build_inputs(
        self, target: Target, app: App, ref: str | None, image: bool
    ) -> BuildInputs | None:
        self._note("build_inputs", str(image))
        if ref is not None or not image or self.build_source is None:
            return None
        inputs = "sha256:" + hashlib.sha256(self.build_source.encode()).hexdigest()
        what = f"{repository_of(app.image or 'memory/app')}:src-{inputs[7:23]}"
        digest = self.built.get(inputs)
        meta = ImageMeta("dockerfile", "/app", 8000) if digest else None
        return BuildInputs("image", what, inputs, "Dockerfile", digest is not None, digest, meta)

    def build(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        inputs: BuildInputs,
        reporter: Reporter,
    ) -> Built:
        clearance.require_covers(target)
        self._note("build", inputs.what)
        if inputs.inputs in self.built:
            digest = self.built[inputs.inputs]
            meta = ImageMeta("dockerfile", "/app", 8000)
            return Built("image", inputs.what, inputs.inputs, inputs.source, digest, meta, True)
        if self.failing_build_log is not None:
            for line in self.failing_build_log:
                reporter.line(f"  build | {line}")
            raise BuildFailed("the Dockerfile's RUN step failed", self.failing_build_log)
        digest = "sha256:" + hashlib.sha256(inputs.inputs.encode()).hexdigest()
        self.built[inputs.inputs] = digest
        meta = ImageMeta("dockerfile", "/app", 8000)
        return Built("image", inputs.what, inputs.inputs, inputs.source, digest, meta, False, 0.1)

    def stop(self, clearance: Clearance, target: Target, reporter: Reporter) -> None:
        clearance.require_covers(target)
        self._note("stop")
        self.live = {k: v for k, v in self.live.items() if v.unit.kind in DATA_KINDS}

    # -- volumes and destroy -------------------------------------------------------
    def volume_notes(self, app: App, slot: Slot, plan: Plan) -> list[str]:
        return []

    def volumes(self, target: Target) -> list[VolumeStatus]:
        self._note("volumes")
        return [
            VolumeStatus(name=str(v.unit.body["name"]), where=k, state="present")
            for k, v in sorted(self.live.items())
            if v.unit.kind in DATA_KINDS
        ]

    def leftovers(self, target: Target) -> list[Leftover]:
        self._note("leftovers")
        out = [Leftover(v.unit.kind, k, v.unit.kind in DATA_KINDS) for k, v in self.live.items()]
        return out + [Leftover("record", f"r{n}") for n in sorted(self.records)]

    def destroy(
        self, clearance: Clearance, target: Target, volumes: bool, reporter: Reporter
    ) -> list[Leftover]:
        clearance.require_covers(target)
        self._note("destroy", "volumes" if volumes else "")
        gone = [item for item in self.leftovers(target) if volumes or not item.data]
        self.live = {
            k: v for k, v in self.live.items() if v.unit.kind in DATA_KINDS and not volumes
        }
        self.records.clear()
        return gone


def expire_lock(backend: MemoryBackend) -> None:
    """Make the held lock look expired (tests of takeover)."""
    backend.lock_taken_at = time.monotonic() - 10 * (
        backend.lock_holder.ttl if backend.lock_holder else 1
    )


_: type[GenerationBackend] = MemoryBackend  # mypy checks it keeps the whole protocol
