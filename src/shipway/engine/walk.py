"""Walking a plan: one step at a time, each given to the backend.

A step that fails stops the walk with a Failure. A best-effort step (dropping an old
route, pruning) that fails is reported as a warning with its manual fix, and the walk
goes on: cleanup never turns a success into a failure. A no-op step says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from shipway.backends.protocol import Backend, Failure, Reason, Reporter, generations_of
from shipway.errors import BackendError, BuildFailed, CleanupFailed, InputError
from shipway.guard import Clearance
from shipway.plan.model import (
    ApplyObject,
    Build,
    DropHost,
    GenerationStep,
    NoOp,
    PointHost,
    Remove,
    RunReleaseCommand,
    Scale,
    Step,
    WaitReplicas,
    WaitRollout,
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
        self.reporter = reporter
        self.result = WalkResult()  # what the last run did so far, also when interrupted

    def run(self, steps: Sequence[Step], timeout: float, label: str = "") -> WalkResult:
        deadline = time.monotonic() + timeout
        result = self.result = WalkResult()
        total = len(steps)
        for i, step in enumerate(steps, start=1):
            self.reporter.line(f"{label}[{i}/{total}] {step.describe()}")
            result.current = step
            try:
                failure = self._do(step, deadline)
            except CleanupFailed as exc:
                failure = None
                result.warnings.append(self._warning(step, str(exc), exc.manual_fix))
            except BuildFailed as exc:
                failure = Failure(
                    reason=Reason.BUILD_FAILED,
                    message=f"{step.describe()}: {exc}",
                    details=exc.log_tail,
                )
            except (BackendError, InputError) as exc:
                # InputError: what the step needs is missing (a secret its objects refer
                # to): the step failed, and the rollout is undone like any failure
                if step.best_effort:
                    result.warnings.append(self._warning(step, str(exc), ""))
                    failure = None
                else:
                    failure = Failure(
                        reason=Reason.STEP_FAILED,
                        message=f"{step.describe()}: {redact(str(exc), self.secrets)}",
                        process=getattr(step, "process", None),
                    )
            if failure is not None:
                result.failure = _masked(failure, self.secrets)
                return result
            result.done.append(step)
            result.current = None
            if isinstance(step, Build):  # the rollout's budget starts once it is built
                deadline = time.monotonic() + timeout
        return result

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


def _masked(failure: Failure, secrets: Mapping[str, Secret]) -> Failure:
    """Invariant 9: a backend's failure may quote an engine's words (events, a log tail);
    whatever it quotes, no secret value reaches the output."""
    return replace(
        failure,
        message=redact(failure.message, secrets),
        details=tuple(redact(d, secrets) for d in failure.details),
    )
