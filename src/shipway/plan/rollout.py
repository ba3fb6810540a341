"""PURE: desired artifact vs observed state → the ordered steps of a rollout.

Order, and why (the same on every backend):
  1. the release's prerequisites (snapshot, config, secrets, files): what its release
     command needs, and nothing that runs a process of it;
  2. the release phase: the release command (migrations), once, in the new release's
     environment, BEFORE any new process starts (Heroku's release phase, dokku's
     predeploy) — when it fails, nothing new ever ran and the previous release serves on;
  3. the new processes that start beside the old ones; then wait for those a switch routes
     to — the health gate, before any traffic moves to them;
  4. units that switch traffic or replace what runs in place; then wait for those;
  5. wait for the new processes no switch routes to (a worker): its gate does not hold
     back the web's route, as a Kubernetes Service does not wait for another Deployment;
     the old processes still run, so its failure switches the routes back and the
     outcome is ``rolled-back``;
  6. removal of what is no longer desired (routes first, prerequisites last) — best effort.
An empty desired set is refused: it would remove everything. A volume is never removed,
declared or not (invariant 11): it belongs to the slot, and only ``destroy`` deletes it.

With a ``batch`` size (Docker's ``batch``, like Kamal's boot limit) and more hosts than
that, the hosts roll a batch at a time, in their order: each batch's prerequisites, new
units, waits, switches and removals, before the next batch starts; the release command
runs once, after the first batch's prerequisites (it runs on the first host) and before any
new process starts. The other hosts keep serving
the deployed release meanwhile. An undo (:func:`restore_steps`) is never batched: it puts
every host back at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from shipway.errors import InputError
from shipway.plan.model import (
    ApplyObject,
    NoOp,
    Observed,
    Plan,
    Remove,
    RunReleaseCommand,
    Step,
    WaitRollout,
)
from shipway.release.artifact import DATA_KINDS, PREREQUISITE, Artifact, Unit
from shipway.release.model import Release


def change_of(unit: Unit, observed: Observed) -> str | None:
    seen = observed.units.get(unit.key)
    if seen is None:
        return "create"
    if seen.digest != unit.digest:
        return "update"
    if seen.state in ("stopped", "created"):
        return "start"
    return None


def is_prerequisite(unit: Unit) -> bool:
    """What a release command may need in place (phase 0 and switching nothing): never a
    unit that starts a process of the new release or moves traffic."""
    return unit.phase == PREREQUISITE and not unit.switches


def _waits(units: Sequence[Unit], later: Sequence[Unit] = ()) -> list[Step]:
    """One wait per process and host; each watches the units of ``later`` on its host
    that wait (their gate comes after a switch: a crash of one stops the switch)."""
    groups: dict[tuple[str, str | None], list[str]] = {}
    for unit in units:
        if unit.waits:
            groups.setdefault((unit.process or unit.key, unit.host), []).append(unit.key)
    return [
        WaitRollout(
            process=process,
            units=tuple(keys),
            host=host,
            watch=tuple(u.key for u in later if u.waits and u.host == host),
        )
        for (process, host), keys in groups.items()
    ]


def _gating(quiet: Sequence[Unit], switching: Sequence[Unit]) -> tuple[list[Unit], list[Unit]]:
    """``quiet`` split into the units whose gate a switch waits for — those of a process
    (on a host) a switching unit routes to, or all of them when a switching unit names no
    process — and the rest, waited for after the switches. Nothing switches: all gate."""
    if not switching or any(u.process is None for u in switching):
        return list(quiet), []
    routed = {(u.process, u.host) for u in switching}
    gating = [u for u in quiet if (u.process, u.host) in routed]
    return gating, [u for u in quiet if (u.process, u.host) not in routed]


def apply_step(unit: Unit, action: str) -> ApplyObject:
    return ApplyObject(
        unit=unit.key,
        kind=unit.kind,
        action=action,  # type: ignore[arg-type]
        process=unit.process,
        host=unit.host,
        generation=unit.generation,
    )


def host_batches(desired: Artifact, batch: int | None) -> list[tuple[str | None, ...]]:
    """The hosts of ``desired`` (in order of their first unit) in batches of ``batch``; one
    batch of every host (and the host-less units, None) when there is no batch size."""
    hosts: list[str | None] = []
    for unit in desired:
        if unit.host not in hosts:
            hosts.append(unit.host)
    named = [h for h in hosts if h is not None]
    if not batch or len(named) <= batch:
        return [tuple(hosts)]
    groups: list[tuple[str | None, ...]] = [
        tuple(named[i : i + batch]) for i in range(0, len(named), batch)
    ]
    if None in hosts:  # what belongs to no host goes with the first batch
        groups[0] = (None, *groups[0])
    return groups


def rollout_steps(
    desired: Artifact,
    observed: Observed,
    release_command: tuple[str, ...] | None = None,
    prune: bool = True,
    batch: int | None = None,
    release_timeout: float | None = None,
) -> list[Step]:
    if not desired.units:
        raise InputError(
            "refusing to apply an empty set of objects: it would remove everything this app runs "
            "(hint: declare at least one process)"
        )
    ordered = sorted(desired, key=lambda u: u.phase)
    changed = [(u, a) for u in ordered if (a := change_of(u, observed)) is not None]
    wanted = set(desired.keys())
    gone = sorted(
        (o for key, o in observed.units.items() if key not in wanted and o.kind not in DATA_KINDS),
        key=lambda o: (-o.phase, o.key),
    )
    groups = host_batches(desired, batch)
    steps: list[Step] = []
    for i, group in enumerate(groups):
        last = i == len(groups) - 1
        mine = [(u, a) for u, a in changed if u.host in group]
        needed = [(u, a) for u, a in mine if is_prerequisite(u)]
        quiet = [(u, a) for u, a in mine if not u.switches and not is_prerequisite(u)]
        switching = [(u, a) for u, a in mine if u.switches]
        steps += [apply_step(u, a) for u, a in needed]
        steps += _waits([u for u, _ in needed])
        if i == 0 and release_command and changed:
            steps.append(RunReleaseCommand(command=release_command, timeout=release_timeout))
        steps += [apply_step(u, a) for u, a in quiet]
        gating, after = _gating([u for u, _ in quiet], [u for u, _ in switching])
        steps += _waits(gating, after)
        steps += [apply_step(u, a) for u, a in switching]
        steps += _waits([u for u, _ in switching])
        steps += _waits(after)
        if prune:  # the last batch also removes what is on hosts no longer listed
            steps += [
                Remove(
                    unit=o.key,
                    kind=o.kind,
                    reason="no longer declared",
                    process=o.process,
                    host=o.host,
                )
                for o in gone
                if o.host in group or (last and not any(o.host in g for g in groups))
            ]
    if not steps:
        steps.append(NoOp(reason=f"all {len(desired)} objects are up to date"))
    return steps


def rollout_plan(
    *,
    operation: str,
    backend: str,
    release: Release,
    observed: Observed,
    release_command: tuple[str, ...] | None = None,
    batch: int | None = None,
    release_timeout: float | None = None,
) -> Plan:
    """The plan that makes the target run ``release`` (its artifact must be rendered)."""
    return Plan(
        app=release.app,
        slot=release.slot,
        backend=backend,
        operation=operation,
        steps=tuple(
            rollout_steps(
                release.artifact,
                observed,
                release_command,
                batch=batch,
                release_timeout=release_timeout,
            )
        ),
        observed=observed.summary(),
        release=release,
    )


def restore_steps(anchor: Artifact, observed: Observed) -> list[Step]:
    """Steps that put the anchor back (a rollback): no release command, prune what the
    failed release added."""
    return rollout_steps(anchor, observed, release_command=None, prune=True)


def with_waits(steps: Sequence[Step], anchor: Artifact) -> list[Step]:
    """``steps`` and, at their end, a wait for every unit of ``anchor`` that waits and no
    step of them waits for: an undo tried again after a fault verifies that what it put
    back serves, even where the first attempt already applied it all."""
    waited = {key for s in steps if isinstance(s, WaitRollout) for key in s.units}
    missing = [u for u in anchor if u.waits and u.key not in waited]
    out = [s for s in steps if not isinstance(s, NoOp)]
    return [*out, *_waits(missing)] or list(steps)


def discard_steps(created: Sequence[ApplyObject], observed: Observed) -> list[Step]:
    """Nothing ran before a failed first deploy: stop the workloads it created, so nothing
    half-made keeps running. Prerequisites (namespaces, snapshots) stay for inspection."""
    steps: list[Step] = []
    for step in reversed(created):
        seen = observed.units.get(step.unit)
        if seen is not None and step.action == "create" and seen.phase >= 1:
            steps.append(
                Remove(
                    unit=step.unit,
                    kind=step.kind,
                    reason="the first deploy failed",
                    process=step.process,
                    host=step.host,
                )
            )
    return steps
