"""Walking a plan: one step at a time, each given to the backend.

A backend whose hosts are independent engines (:class:`~shipway.backends.protocol.FansOut`,
Docker) gets a *wave* at once: consecutive steps of one kind on different hosts (create on
every host, then wait on every host, then switch every host …), each host's in a thread of
its own; the order of the steps on any one host is the plan's. A step that fails stops
the walk with a Failure (the wave's other steps under way finish first). A best-effort
step (dropping an old route, pruning) that fails is reported as a warning with its manual
fix, and the walk goes on: cleanup never turns a success into a failure. A no-op step says
why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from shipway.backends.accessories import accessories_of
from shipway.backends.protocol import (
    Backend,
    Failure,
    Reason,
    Reporter,
    fan_out_of,
    generations_of,
    sources_of,
)
from shipway.engine.canary import CanaryWalk
from shipway.errors import BackendError, BuildFailed, CleanupFailed, InputError
from shipway.events.model import Event, StepBegun
from shipway.events.sink import tell
from shipway.guard import Clearance
from shipway.plan.model import (
    AnalyseCanary,
    ApplyObject,
    Build,
    CanaryStep,
    DropHost,
    GenerationStep,
    NoOp,
    PointHost,
    Remove,
    RunReleaseCommand,
    Scale,
    SetImage,
    ShiftTraffic,
    StartAccessory,
    Step,
    WaitImage,
    WaitReplicas,
    WaitRollout,
    WorkloadStep,
)
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret, redact

#: runs a plan's build step and returns the release with what was built (engine.build)
Builder = Callable[[Build, Release], Release]


@dataclass
class WalkResult:
    """What a walk did. ``current``: the step under way when the walk stopped (it failed, or
    a signal or an error interrupted it) — it may have done part of its work, so an undo
    must consider it too."""

    failure: Failure | None = None
    done: list[Step] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    current: Step | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def created(self) -> list[ApplyObject]:
        return [s for s in self.done if isinstance(s, ApplyObject) and s.action == "create"]


class _Serial:
    """A reporter that threads share: one line or progress report at a time."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            self.reporter.line(text)

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None:
        with self.lock:
            self.reporter.progress(process, counts, note)

    def emit(self, event: Event) -> None:
        with self.lock:
            tell(self.reporter, event)


def _wave_key(step: Step) -> tuple[str, str] | None:
    """Steps with one key, on different hosts, may run at once; None: never with another."""
    if getattr(step, "host", None) is None:
        return None
    if isinstance(step, ApplyObject):
        return ("apply", step.kind)
    if isinstance(step, WaitRollout):
        return ("wait", step.process)
    if isinstance(step, Remove):
        return ("remove", step.kind)
    return None


def waves(steps: Sequence[Step], width: int) -> Iterator[list[Step]]:
    """The steps in order, in runs of at most ``width`` consecutive steps of one kind on
    pairwise different hosts (a run of one when ``width`` is 1)."""
    wave: list[Step] = []
    for step in steps:
        key = _wave_key(step)
        joins = (
            wave
            and key is not None
            and len(wave) < width
            and _wave_key(wave[0]) == key
            and all(getattr(s, "host", None) != getattr(step, "host", None) for s in wave)
        )
        if wave and not joins:
            yield wave
            wave = []
        wave.append(step)
    if wave:
        yield wave


class Walker:
    def __init__(
        self,
        backend: Backend,
        clearance: Clearance,
        target: Target,
        release: Release,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
        builder: Builder | None = None,
    ) -> None:
        self.backend = backend
        self.builder = builder
        self.clearance = clearance
        self.target = target
        self.release = release
        self.secrets = secrets
        self.reporter = _Serial(reporter)
        self.width = fan_out_of(backend)
        self.result = WalkResult()  # what the last run did so far, also when interrupted
        self.canary: CanaryWalk | None = None  # a canary's windows, once its first step ran

    def run(self, steps: Sequence[Step], timeout: float, label: str = "") -> WalkResult:
        deadline = time.monotonic() + timeout
        result = self.result = WalkResult()
        total = len(steps)
        i = 0
        for wave in waves(steps, self.width):
            for step in wave:
                i += 1
                self.reporter.emit(StepBegun(i, total, step.describe(), label))
            result.current = wave[0]
            began = time.monotonic()
            if len(wave) == 1:
                failures = [self._attempt(wave[0], deadline, result)]
            else:  # only a wave of several steps (hosts in parallel) needs the pool
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=len(wave)) as pool:
                    futures = [pool.submit(self._attempt, s, deadline, result) for s in wave]
                    failures = [f.result() for f in futures]
            for step, failure in zip(wave, failures, strict=True):
                if failure is None:
                    result.done.append(step)
                elif result.failure is None:
                    result.failure = _masked(failure, self.secrets)
                    result.current = step
            if result.failure is not None:
                return result
            result.current = None
            if isinstance(wave[0], Build):  # the rollout's budget starts once it is built
                deadline = time.monotonic() + timeout
            if isinstance(wave[0], AnalyseCanary):  # a canary's time is its own (its timeout)
                deadline += time.monotonic() - began
        if self.canary is not None and self.canary.baseline is not None:
            # every step done: the canary is over (a proxy that splits beside the switched
            # route, as a Gateway's HTTPRoute does, sends everything to the switched release)
            try:
                self.canary.finish(self.release)
            except (BackendError, InputError) as exc:
                result.warnings.append(self._warning(wave[0], str(exc), ""))
        return result

    def _attempt(self, step: Step, deadline: float, result: WalkResult) -> Failure | None:
        """One step: its failure, or None (a best-effort step's failure is a warning)."""
        try:
            return self._do(step, deadline)
        except CleanupFailed as exc:
            result.warnings.append(self._warning(step, str(exc), exc.manual_fix))
        except BuildFailed as exc:
            return Failure(
                reason=Reason.BUILD_FAILED,
                message=f"{step.describe()}: {exc}",
                details=exc.log_tail,
            )
        except (BackendError, InputError) as exc:
            # InputError: what the step needs is missing (a secret its objects refer
            # to): the step failed, and the rollout is undone like any failure
            if not step.best_effort:
                return Failure(
                    reason=Reason.STEP_FAILED,
                    message=f"{step.describe()}: {redact(str(exc), self.secrets)}",
                    process=getattr(step, "process", None),
                )
            result.warnings.append(self._warning(step, str(exc), ""))
        return None

    def _warning(self, step: Step, message: str, fix: str) -> str:
        text = f"{step.describe()} failed: {redact(message, self.secrets)}"
        if fix:
            text += f"; to fix by hand: {fix}"
        self.reporter.line(f"warning: {text}")
        return text

    def _do(self, step: Step, deadline: float) -> Failure | None:
        b, c, t, r = self.backend, self.clearance, self.target, self.reporter
        if isinstance(step, Build):
            if self.builder is None:
                raise InputError("this operation builds nothing: its plan cannot hold a build")
            # the release now names what was built (its digest, its image's metadata)
            self.release = self.builder(step, self.release)
        elif isinstance(step, ApplyObject):
            b.apply(c, t, self.release.artifact.get(step.unit), step.action, self.secrets, r)
        elif isinstance(step, WaitRollout):
            return b.wait(t, step, self.release.artifact, deadline, r)
        elif isinstance(step, RunReleaseCommand):
            return self._release_command(step, deadline)
        elif isinstance(step, Remove):
            b.remove(c, t, step, r)
        elif isinstance(step, GenerationStep):
            return self._do_generation(step, deadline)
        elif isinstance(step, WorkloadStep):
            return self._do_workload(step, deadline)
        elif isinstance(step, CanaryStep):
            return self._do_canary(step)
        elif isinstance(step, StartAccessory):
            return accessories_of(b).start_accessory(c, t, step, deadline, r)
        elif isinstance(step, NoOp):
            pass
        else:  # pragma: no cover - every step type is handled above
            raise TypeError(f"unknown step {step!r}")
        return None

    def _release_command(self, step: RunReleaseCommand, deadline: float) -> Failure | None:
        """The release command, stopped at its own timeout or the deploy's deadline,
        whichever comes first; the backend kills what it started on either."""
        own = time.monotonic() + step.timeout if step.timeout is not None else deadline
        failure = self.backend.run_release_command(
            self.clearance,
            self.target,
            self.release,
            step.command,
            self.secrets,
            min(deadline, own),
            self.reporter,
        )
        if (
            failure is not None
            and failure.reason == Reason.RELEASE_COMMAND_TIMEOUT
            and step.timeout is not None
            and own <= deadline
        ):
            hint = (
                f"it ran for its release_timeout ({step.timeout:g}s) and was stopped "
                "(hint: raise [app] release_timeout if it needs longer)"
            )
            failure = replace(failure, message=f"{failure.message}: {hint}")
        return failure

    def _do_generation(self, step: GenerationStep, deadline: float) -> Failure | None:
        gb, c, t, r = generations_of(self.backend), self.clearance, self.target, self.reporter
        if isinstance(step, Scale):
            if step.delay:
                time.sleep(step.delay)  # the drain delay the plan asks for, not a wait
            gb.scale(c, t, step, r)
        elif isinstance(step, WaitReplicas):
            return gb.wait_replicas(t, step, deadline, r)
        elif isinstance(step, PointHost):
            gb.point_host(c, t, step, r)
        elif isinstance(step, DropHost):
            gb.drop_host(c, t, step, r)
        else:  # pragma: no cover - every generation step is handled above
            raise TypeError(f"unknown generation step {step!r}")
        return None

    def _do_canary(self, step: CanaryStep) -> Failure | None:
        """A canary's share set, or its analysis run until it is promoted or aborted (the
        pending record says each step's verdict)."""
        if self.canary is None:

            def record(release: Release) -> None:
                self.backend.write_records(self.clearance, self.target, [release])

            self.canary = CanaryWalk(
                self.backend, self.clearance, self.target, self.reporter, record
            )
        if isinstance(step, ShiftTraffic):
            return self.canary.shift(self.release, step)
        if isinstance(step, AnalyseCanary):
            failure, self.release = self.canary.analyse(self.release, step)
            return failure
        raise TypeError(f"unknown canary step {step!r}")  # pragma: no cover

    def _do_workload(self, step: WorkloadStep, deadline: float) -> Failure | None:
        sb, c, t, r = sources_of(self.backend), self.clearance, self.target, self.reporter
        if isinstance(step, SetImage):
            sb.set_image(c, t, step, r)
        elif isinstance(step, WaitImage):
            return sb.wait_image(t, step, deadline, r)
        else:  # pragma: no cover - every workload step is handled above
            raise TypeError(f"unknown workload step {step!r}")
        return None


def _masked(failure: Failure, secrets: Mapping[str, Secret]) -> Failure:
    """Invariant 9: a backend's failure may quote an engine's words (events, a log tail);
    whatever it quotes, no secret value reaches the output."""
    return replace(
        failure,
        message=redact(failure.message, secrets),
        details=tuple(redact(d, secrets) for d in failure.details),
    )
