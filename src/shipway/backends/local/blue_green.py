"""Generations of a blue-green slot (:mod:`.generations` holds their records): each release
is a snapshot and programs labelled with its generation, started beside the live one.

``scale`` starts or stops a generation's instances (asleep = no instance, records kept),
``wait_replicas`` is the health gate, ``point_host`` adds the generation's claim of a host
to the router (the newest claim wins: one atomic switch) and ``drop_host`` removes the old
generation's claim (best effort: a stale claim loses anyway). A generation serving a host
is never put to sleep, and the live one is never deleted.
"""

from __future__ import annotations

from shipway.backends.local import preflight, render
from shipway.backends.local.generations import (
    live_generation,
    read_claims,
    read_generations,
    write_claims,
)
from shipway.backends.local.health import LocalHealth
from shipway.backends.local.programs import LocalPrograms
from shipway.backends.local.records import Route, read_programs
from shipway.backends.protocol import Failure, GenerationInfo, HostOwner, Reason, Reporter
from shipway.errors import BackendError, CleanupFailed
from shipway.guard import Clearance
from shipway.plan.model import DropHost, PointHost, Scale, WaitReplicas
from shipway.release import history
from shipway.spec.model import App, Slot, Target


class LocalBlueGreen(LocalPrograms, LocalHealth):
    """What a blue-green slot adds (the protocol's Generations)."""

    def hosts(self, app: App, slot: Slot) -> list[tuple[str, str]]:
        return render.hosts_of(app, slot)

    def scale(self, clearance: Clearance, target: Target, step: Scale, reporter: Reporter) -> None:
        """Start (wake) or stop (put to sleep: no instance, records kept) a generation's
        instances of one process. A generation serving a host is never put to sleep."""
        d = self._guarded(clearance, target)
        if step.generation is None:
            raise BackendError("the local backend scales the processes of a generation only")
        found = self._generation_programs(d, step.generation, step.process)
        if not found and step.replicas == 0:  # e.g. recovering a deploy killed before apply
            reporter.line(f"  generation {step.generation} runs no {step.process}: nothing to stop")
            return
        if not found:
            raise BackendError(
                f"generation {step.generation} has no {step.process} program "
                f"(hint: shipway gens {target.slot})"
            )
        try:
            if step.replicas > 0:
                self._scale_program(target, d, found[0][0], step.replicas, reporter)
                return
            served = self._hosts_served_by(d, step.generation)
            if served:
                raise BackendError(
                    f"generation {step.generation} serves {', '.join(served)}: it is not put "
                    "to sleep under its traffic (hint: switch to another generation first)"
                )
            for key, _ in found:
                self._scale_program(target, d, key, 0, reporter)
        except OSError as exc:
            raise BackendError(f"scaling {step.process} of {step.generation}: {exc}") from exc

    def wait_replicas(
        self, target: Target, step: WaitReplicas, deadline: float, reporter: Reporter
    ) -> Failure | None:
        """The health gate, on the generation's (newest) program of the process."""
        d = self.dirs(target)
        found = self._generation_programs(d, step.generation or "", step.process)
        if not found:
            return Failure(
                reason=Reason.NOT_STARTED,
                message=f"generation {step.generation} has no {step.process} program",
                process=step.process,
            )
        key, rec = found[0]
        have = len(rec.instances)
        if have < step.replicas:
            return Failure(
                reason=Reason.NOT_SCALED,
                message=f"{key} has {have} of {step.replicas} instances",
                process=step.process,
            )
        return self._gate(target, d, rec, deadline, reporter)

    def point_host(
        self, clearance: Clearance, target: Target, step: PointHost, reporter: Reporter
    ) -> None:
        """Claim the host for the generation's program in the router, newer than every other
        claim: one table write and one reload, so the switch is atomic. On failure the claim
        is withdrawn, so no record says the host moved when it may not have."""
        d = self._guarded(clearance, target)
        generation = step.generation or ""
        running = [
            (k, r) for k, r in self._generation_programs(d, generation, step.process) if r.instances
        ]
        if not running:
            raise BackendError(
                f"{step.process} of generation {generation} is not running: {step.host} cannot "
                f"point at it (hint: shipway wake {target.slot} {generation})"
            )
        key, rec = running[0]
        port = self.router_port
        try:
            self.router(port).ensure(wait=True)
            before = read_claims(d)
            claims = read_claims(d)
            claims.setdefault(generation, {})[step.host] = Route(
                program=key,
                process=step.process,
                router_port=port,
                since=self._next_since(port, step.host),
            )
            write_claims(d, claims)
            self._switch(d, [port], lambda: write_claims(d, before))
        except OSError as exc:
            raise BackendError(f"pointing {step.host} at {generation}: {exc}") from exc
        reporter.line(
            f"  serving http://{step.host}:{port}/ -> {step.process} {rec.release} of "
            f"generation {generation} ({', '.join(rec.upstreams)})"
        )
        if not preflight.resolves_here(step.host):
            hint = preflight.curl_hint(step.host, port)
            reporter.line(f"    {step.host} does not resolve here: {hint}")

    def drop_host(
        self, clearance: Clearance, target: Target, step: DropHost, reporter: Reporter
    ) -> None:
        """Best effort: withdraw the generation's claim of the host and reload the router.
        The claim already loses to the newer one, so a failure here leaves traffic where it
        belongs; it is reported with the manual fix (CleanupFailed)."""
        d = self._guarded(clearance, target)
        generation = step.generation or ""
        claims = read_claims(d)
        claim = claims.get(generation, {}).pop(step.host, None)
        if claim is None:
            reporter.line(f"  {step.host} was not routed to generation {generation}")
            return
        port = claim.router_port
        router = self.router(port)
        table = router.table_file(d.app, d.slot, generation)
        try:
            write_claims(d, claims)
            self._retable(d, [port], must_reload=True)
        except (BackendError, OSError) as exc:
            raise CleanupFailed(
                f"the router on 127.0.0.1:{port} did not take the drop of {step.host} from "
                f"generation {generation} ({exc}); the stale claim loses to the newer one, so "
                "traffic already goes to the live generation",
                f"remove {step.host} from {table} if it is still there, then reload the "
                f"router: curl --unix-socket {router.sock} -X POST http://router/reload",
            ) from exc
        reporter.line(f"  dropped {step.host} from generation {generation}")

    def generations(self, target: Target) -> list[GenerationInfo]:
        """Oldest first. Live: the generation the slot's hosts point at (its newest claim);
        for an app with no host, the deployed release's generation while it runs. Awake:
        some instance of it runs. Asleep: none does."""
        d = self.dirs(target)
        known = read_generations(d)
        if not known:
            return []
        records = self._records(d)
        awake = {
            str(r.generation) for r in read_programs(d).values() if r.generation and r.instances
        }
        claims = read_claims(d)
        live = live_generation(claims)
        if live is None and not any(claims.values()):
            deployed = history.deployed(records)
            if deployed is not None and deployed.generation in awake:
                live = deployed.generation
        out = []
        for name, meta in sorted(known.items(), key=lambda kv: (kv[1].created_at, kv[0])):
            ran = [r.revision for r in records if r.generation == name]
            out.append(
                GenerationInfo(
                    name=name,
                    state="live" if name == live else "awake" if name in awake else "asleep",
                    release=max(ran) if ran else meta.revision,
                    created_at=meta.created_at,
                )
            )
        return out

    def host_owner(self, target: Target, host: str) -> HostOwner | None:
        """Who the router table (its files: the router need not run) says serves ``host`` on
        this slot's router port: any app's slot on it, rolling or blue-green."""
        held = self.router(self.router_port).table().get(host.lower())
        if held is None:
            return None
        return HostOwner(
            app=str(held["app"]),
            slot=str(held["slot"]),
            generation=held.get("generation"),
            where=f"router 127.0.0.1:{self.router_port}",
        )

    def delete_generation(
        self, clearance: Clearance, target: Target, generation: str, reporter: Reporter
    ) -> None:
        """Drain, stop and remove the generation's programs, drop its claims, free its
        snapshot. The generation serving the slot's hosts is refused."""
        d = self._guarded(clearance, target)
        if generation not in read_generations(d):
            raise BackendError(f"no generation {generation} in {target}")
        if generation == live_generation(read_claims(d)):
            raise BackendError(f"generation {generation} is live: switch to another one first")
        try:
            self._forget_generation(d, generation, reporter)
        except OSError as exc:
            raise BackendError(f"deleting generation {generation}: {exc}") from exc
