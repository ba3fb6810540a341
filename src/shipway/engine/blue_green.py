"""Blue/green generations: a deploy as a new generation beside the live one, switches
between kept generations (wake → wait → point hosts → drop the old route → sleep the old),
and the undo of a switch that failed half-way. Hosts another app or slot serves are
refused unless taken explicitly (``_claim_hosts``, which a rolling deploy uses too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from shipway.backends.protocol import (
    Backend,
    GenerationBackend,
    GenerationInfo,
    LockHolder,
    generations_of,
)
from shipway.engine.done import Done
from shipway.engine.outcome import Outcome
from shipway.engine.sequence import RolloutSequence
from shipway.engine.signals import signals_raise
from shipway.engine.timeouts import DEFAULT_ROLLBACK_TIMEOUT, DEFAULT_TIMEOUT
from shipway.engine.walk import Walker, WalkResult
from shipway.errors import BackendError, HostTaken, InputError
from shipway.guard import Clearance
from shipway.plan.generation import switch_plan, switch_steps
from shipway.plan.model import (
    ApplyObject,
    DropHost,
    Observed,
    Plan,
    PointHost,
    Scale,
    Step,
    WaitReplicas,
)
from shipway.release import history
from shipway.release.model import Release, ReleaseStatus
from shipway.spec.model import App, Target
from shipway.spec.parse import from_snapshot


def live_generation(gens: Sequence[GenerationInfo]) -> str | None:
    return next((g.name for g in gens if g.state == "live"), None)


def new_generation_name(slot: str, gens: Sequence[GenerationInfo]) -> str:
    """``<slot>-<YYYYMMDD-HHMMSS>`` (UTC), unique among the slot's generations."""
    from datetime import UTC, datetime

    base = f"{slot[:40]}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    taken = {g.name for g in gens}
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


class BlueGreen(RolloutSequence):
    """Generations kept side by side, and the switches between them."""

    def _generations(self) -> GenerationBackend:
        return generations_of(self.backend)

    def generations(self, app: App, slot_name: str) -> list[GenerationInfo]:
        return self._generations().generations(app.slots.target(slot_name))

    def _generation_plan(
        self,
        app: App,
        slot_name: str,
        release: Release,
        observed: Observed,
        operation: str,
        take_host: bool,
    ) -> Plan:
        """A deploy to a blue-green slot: the release becomes a new generation beside the
        live one; hosts move only once it is ready."""
        gb = self._generations()
        slot = app.slots.get(slot_name)
        view = app.in_slot(slot_name)
        target = app.slots.target(slot_name)
        gens = gb.generations(target)
        release = replace(release, generation=new_generation_name(slot_name, gens))
        release = replace(release, artifact=gb.render(view, slot, release))
        steps = switch_steps(
            to_generation=release.generation or "",
            from_generation=live_generation(gens),
            replicas={name: p.replicas for name, p in view.processes.items()},
            hosts=self._claim_hosts(gb, target, gb.hosts(view, slot), take_host),
            release=release,
            observed=observed,
            sleep_delay=slot.sleep_after,
            release_command=view.release_command,
            release_timeout=view.release_deadline,
        )
        return switch_plan(
            app=app.name,
            slot=slot_name,
            backend=gb.name,
            observed=observed,
            steps=steps,
            release=release,
            operation=operation,
        )

    def _claim_hosts(
        self,
        backend: Backend,
        target: Target,
        hosts: list[tuple[str, str]],
        take_host: bool,
    ) -> list[tuple[str, str]]:
        """Refuse a host another app or slot serves, unless told to take it (every
        backend, every strategy: a rolling deploy asks too)."""
        for host, _ in hosts:
            owner = backend.host_owner(target, host)
            if owner is None or (owner.app, owner.slot) == (target.app, target.slot):
                continue
            if not take_host:
                raise HostTaken(host, str(owner))
            self.reporter.line(f"taking host {host} from {owner} (--take-host)")
        return hosts

    def switch_to(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        generation: str,
        *,
        take_host: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        rollback_timeout: float = DEFAULT_ROLLBACK_TIMEOUT,
    ) -> Outcome:
        """Switch the slot back (or forth) to a kept generation: wake → wait → point →
        drop → the live one goes to sleep. Recorded as a new revision."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        secrets = self.secrets(app, slot_name)
        gb = self._generations()

        def build(records: list[Release], observed: Observed) -> Plan:
            gens = gb.generations(target)
            source = self._generation_release(records, gens, generation)
            recorded = from_snapshot(source.spec, app.source_dir)
            live = live_generation(gens)
            slot = app.slots.get(slot_name)
            release = self._successor(
                source,
                records,
                f"switch to {generation} (r{source.revision})"
                + (f"; {live} goes to sleep" if live and live != generation else ""),
            )
            steps = switch_steps(
                to_generation=generation,
                from_generation=live,
                replicas={name: p.replicas for name, p in recorded.processes.items()},
                hosts=self._claim_hosts(gb, target, gb.hosts(recorded, slot), take_host),
                sleep_delay=slot.sleep_after,
            )
            plan = switch_plan(
                app=app.name,
                slot=slot_name,
                backend=gb.name,
                observed=observed,
                steps=steps,
                release=release,
            )
            return self._noted(plan, recorded, slot_name)

        return self._rollout(
            clearance, target, app, secrets, build, self._sleep_new, timeout, rollback_timeout,
            taken=("take-host",) * take_host,
        )  # fmt: skip

    @staticmethod
    def _generation_release(
        records: Sequence[Release], gens: Sequence[GenerationInfo], generation: str
    ) -> Release:
        names = [g.name for g in gens]
        if generation not in names:
            raise InputError(
                f"no generation {generation!r} in this slot (have: {', '.join(names) or 'none'})"
            )
        ran = [
            r
            for r in history.ordered(records)
            if r.generation == generation
            and r.status in (ReleaseStatus.DEPLOYED, ReleaseStatus.SUPERSEDED)
        ]
        if not ran:
            raise InputError(f"generation {generation!r} never went live: nothing to switch to")
        return ran[-1]

    def sleep(self, clearance: Clearance, app: App, slot_name: str, generation: str) -> None:
        """Scale an asleep-to-be generation to zero. The live one is refused."""
        self._scale_generation(clearance, app, slot_name, generation, wake=False)

    def wake(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        generation: str,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        """Scale a generation back to its replicas and wait until it is ready (no traffic)."""
        self._scale_generation(clearance, app, slot_name, generation, wake=True, timeout=timeout)

    def _scale_generation(
        self,
        clearance: Clearance,
        app: App,
        slot_name: str,
        generation: str,
        *,
        wake: bool,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        gb = self._generations()
        holder = LockHolder.me(self.lock_ttl)
        verb = "wake" if wake else "sleep"
        with signals_raise(), gb.lock(clearance, target, holder, self.reporter):
            records = gb.read_records(target)
            gens = gb.generations(target)
            source = self._generation_release(records, gens, generation)
            if not wake and generation == live_generation(gens):
                raise InputError(f"generation {generation!r} is live: switch to another one first")
            processes = from_snapshot(source.spec, app.source_dir).processes
            steps: list[Step] = [
                Scale(process=n, replicas=p.replicas if wake else 0, generation=generation)
                for n, p in processes.items()
            ]
            if wake:
                steps += [
                    WaitReplicas(process=n, replicas=p.replicas, generation=generation)
                    for n, p in processes.items()
                ]
            with self._telling(clearance, target, app, verb, f"{verb} generation {generation}"):
                walker = Walker(gb, clearance, target, source, {}, self.reporter)
                result = walker.run(steps, timeout)
                if result.failure is not None:
                    raise BackendError(result.failure.headline())
                state = "awake (no traffic moved)" if wake else "asleep"
                doc = {"slot": slot_name, "generation": generation, "state": state}
                self._done(Done(verb, str(target), f"{generation} is {state}", doc))

    def gc(self, clearance: Clearance, app: App, slot_name: str, keep: int) -> list[str]:
        """Delete asleep generations beyond the ``keep`` newest; never the live one."""
        target = app.slots.target(slot_name)
        clearance.require_covers(target)
        gb = self._generations()
        holder = LockHolder.me(self.lock_ttl)
        with signals_raise(), gb.lock(clearance, target, holder, self.reporter):
            what = f"delete asleep generations beyond the {keep} newest"
            with self._telling(clearance, target, app, "gc", what):
                # the backend lists oldest first (its clock may tie two generations made in
                # one second, its order does not): all but the ``keep`` newest asleep go
                asleep = [g for g in gb.generations(target) if g.state == "asleep"]
                doomed = [g.name for g in asleep[: max(len(asleep) - max(keep, 0), 0)]]
                for name in doomed:
                    self.reporter.line(f"deleting asleep generation {name}")
                    gb.delete_generation(clearance, target, name, self.reporter)
                line = f"deleted {len(doomed)} generation(s): {', '.join(doomed) or '-'}"
                self._done(Done("gc", str(target), line, {"slot": slot_name, "deleted": doomed}))
                return doomed

    def _sleep_new(self, target: Target, result: WalkResult, anchor: Release | None) -> list[Step]:
        """Undo for a generation switch: put back what this switch moved.

        Hosts it already pointed at the new generation go back to the anchor's generation
        (woken and waited on first, as in any switch) — or, with no anchor, are dropped —
        before anything is put to sleep: a generation is never stopped under its traffic.
        Then every process the switch woke goes back to sleep: scaled up, or applied (a
        backend may start what it applies), including the step under way when it stopped.
        A point that failed left its host where it was (pointing is the backend's one
        atomic move), but a point *interrupted* (a signal: the walk stopped with no failure)
        may have moved its host before the signal landed: that host goes back too —
        pointing a host back where it already is changes nothing, while a moved host left
        on a generation about to sleep would be an outage.
        """
        attempted = [*result.done, *([result.current] if result.current else [])]
        woken: dict[tuple[str, str], None] = {}
        for s in attempted:
            wakes = (isinstance(s, Scale) and s.replicas > 0) or isinstance(s, ApplyObject)
            if wakes and isinstance(s, Scale | ApplyObject) and s.generation and s.process:
                woken[(s.generation, s.process)] = None
        pointed: dict[str, str] = {}
        moved_to: str | None = None
        interrupted = result.current if result.failure is None else None
        for s in [*result.done, *([interrupted] if interrupted else [])]:
            if isinstance(s, PointHost) and s.generation:
                pointed[s.host] = s.process
                moved_to = s.generation
        steps: list[Step] = []
        back_to = anchor.generation if anchor is not None else None
        if pointed and anchor is not None and back_to is not None and back_to != moved_to:
            recorded = from_snapshot(anchor.spec, Path("."))
            switch_back = switch_steps(
                to_generation=back_to,
                from_generation=moved_to,
                replicas={name: p.replicas for name, p in recorded.processes.items()},
                hosts=list(pointed.items()),
            )
            steps += [s for s in switch_back if not (isinstance(s, Scale) and s.replicas == 0)]
        elif pointed and moved_to is not None:
            steps += [DropHost(host=host, generation=moved_to) for host in pointed]
        steps += [
            Scale(process=process, replicas=0, generation=generation)
            for generation, process in woken
            if generation != back_to
        ]
        return steps
