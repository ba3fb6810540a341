"""The accessories of a deploy: what it must start first, and the links the app gets.

Only a deploy (or promote) plans accessories, before the build: each one missing, down, or
whose own declaration changed. A rollback, restart, repair or switch never does, and the
undo of a failed deploy never names one (it re-applies the anchor's artifact, which holds
no accessory): invariant 16. The engine knows no backend: the part it asks is
:class:`~shipway.backends.accessories.Accessories`.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from shipway.backends.accessories import accessories_of, runs_accessories
from shipway.backends.protocol import Backend, Reporter
from shipway.errors import BackendError, InputError, SecretUnavailable
from shipway.guard import Clearance
from shipway.plan.accessories import accessory_steps, undeclared_notes
from shipway.plan.model import Plan, StartAccessory, Step
from shipway.spec.model import App, Target
from shipway.spec.secrets import Secret


@dataclass(frozen=True)
class AccessoryPlan:
    steps: tuple[StartAccessory, ...] = ()
    notes: tuple[str, ...] = ()

    def applied(self, plan: Plan) -> Plan:
        """The plan with the accessories started first (before the build phase)."""
        if not self.steps and not self.notes:
            return plan
        return replace(plan, steps=(*self.steps, *plan.steps), notes=(*plan.notes, *self.notes))


def accessory_plan(
    backend: Backend, app: App, slot_name: str, upgrade: Collection[str] = ()
) -> AccessoryPlan:
    """What a deploy of ``slot_name`` starts of the app's accessories (reads only). Raises
    InputError when the backend runs none, this machine lacks a declared version, or a
    major version would change and ``upgrade`` does not name the accessory."""
    if not app.accessories and not runs_accessories(backend):
        if upgrade:
            name = sorted(upgrade)[0]
            raise InputError(f"--upgrade-accessory {name}: the spec declares no accessory")
        return AccessoryPlan()
    part = accessories_of(backend)
    slot = app.slots.get(slot_name)
    problems = part.accessory_problems(app, slot)
    if problems:
        raise InputError("\n".join(problems))
    seen = {s.name: s.seen() for s in part.accessories(app.slots.target(slot_name))}
    steps = accessory_steps(app.accessories, seen, app.spec_file.name, upgrade)
    return AccessoryPlan(tuple(steps), tuple(undeclared_notes(app.accessories, seen)))


def accessory_secrets(
    backend: Backend,
    app: App,
    slot_name: str,
    clearance: Clearance | None,
    planning: bool,
) -> dict[str, Secret]:
    """The values of the app's ``from_accessory`` secrets in the slot, and each password
    alone (masked in every output, never a placeholder). With a clearance (a deploy), the
    credentials an accessory lacks are made; ``planning``: an accessory a deploy will make
    gets an empty value for now."""
    refs = {n: r.from_accessory for n, r in app.secrets.items() if r.from_accessory}
    if not app.accessories:
        return {}
    target = app.slots.target(slot_name)
    links = accessories_of(backend).accessory_links(target, app.accessories, clearance)
    out: dict[str, Secret] = {
        name: value for name, value in links.items() if name.startswith("(accessory ")
    }
    for name, accessory in refs.items():
        assert accessory is not None
        if accessory in links:
            out[name] = links[accessory]
        elif planning:
            out[name] = Secret("")
        else:
            raise SecretUnavailable(
                f"secrets.{name}: accessory {accessory} has no credentials in slot "
                f"{slot_name} yet (hint: shipway deploy {slot_name} makes them)"
            )
    return out


def start_accessories(
    backend: Backend,
    clearance: Clearance,
    target: Target,
    steps: Sequence[Step],
    timeout: float,
    reporter: Reporter,
) -> tuple[str, ...]:
    """The accessory steps of a "no changes" deploy, walked (the app is left as it runs):
    the names started. One that fails is a BackendError: no release was made, so there is
    nothing to roll back."""
    deadline = time.monotonic() + timeout
    started = []
    for step in steps:
        if not isinstance(step, StartAccessory):
            continue
        part = accessories_of(backend)
        reporter.line(step.describe())
        failure = part.start_accessory(clearance, target, step, deadline, reporter)
        if failure is not None:
            raise BackendError("\n".join(failure.lines()))
        started.append(step.accessory)
    return tuple(started)
