"""PURE: the switch from the live generation to another (blue/green).

Order, and why: the new generation's prerequisites (its snapshot, its config and
secrets) are applied first; then the release command runs, once, before any process of the
generation starts (when it fails, nothing of the new generation ever ran); then the
generation's processes are applied and scaled, then waited on; only when it is
ready does any host move (a failed wait never touches routes). The old generation's route
is dropped best-effort — traffic already goes the right way — and the old generation is
put to sleep after a drain delay, kept for an instant switch back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shipway.plan.model import (
    DropHost,
    NoOp,
    Observed,
    Plan,
    PointHost,
    RunReleaseCommand,
    Scale,
    Step,
    WaitReplicas,
)
from shipway.plan.rollout import apply_step, change_of, is_prerequisite
from shipway.release.model import Release


def switch_steps(
    *,
    to_generation: str,
    from_generation: str | None,
    replicas: Mapping[str, int],
    hosts: Sequence[tuple[str, str]],
    release: Release | None = None,
    observed: Observed | None = None,
    sleep_delay: float = 0.0,
    release_command: tuple[str, ...] | None = None,
    release_timeout: float | None = None,
) -> list[Step]:
    """``hosts``: (host name, process) pairs to point at the new generation. The release
    command, when given, runs once the generation's prerequisites are in place and before
    any of its processes is applied (a backend may start what it applies)."""
    if to_generation == from_generation:
        return [NoOp(reason=f"generation {to_generation} is already live")]
    needed: list[Step] = []
    processes: list[Step] = []
    if release is not None:
        seen = observed or Observed()
        for unit in sorted(release.artifact, key=lambda u: u.phase):
            action = change_of(unit, seen)
            if action is not None:
                (needed if is_prerequisite(unit) else processes).append(apply_step(unit, action))
    steps: list[Step] = [*needed]
    if release_command:
        steps.append(RunReleaseCommand(command=release_command, timeout=release_timeout))
    steps += processes
    for process, count in replicas.items():
        steps.append(Scale(process=process, replicas=count, generation=to_generation))
    for process, count in replicas.items():
        steps.append(WaitReplicas(process=process, replicas=count, generation=to_generation))
    for host, process in hosts:
        steps.append(PointHost(host=host, process=process, generation=to_generation))
    if from_generation is None:
        steps.append(NoOp(reason="no generation was live before: nothing to drop or put to sleep"))
        return steps
    for host, _ in hosts:
        steps.append(DropHost(host=host, generation=from_generation))
    for process in replicas:
        steps.append(
            Scale(process=process, replicas=0, generation=from_generation, delay=sleep_delay)
        )
    return steps


def switch_plan(
    *,
    app: str,
    slot: str,
    backend: str,
    observed: Observed,
    steps: Sequence[Step],
    release: Release | None = None,
    operation: str = "switch",
) -> Plan:
    return Plan(
        app=app,
        slot=slot,
        backend=backend,
        operation=operation,
        steps=tuple(steps),
        observed=observed.summary(),
        release=release,
    )
