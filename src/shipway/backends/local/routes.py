"""Hosts in the router: the rolling slot's routes and the generations' claims (the records),
written out as the router's table files and reloaded.

A host moves by one table write and one reload — an atomic switch — and the record is put
back when a router does not take it, so no record says a host moved when it may not have.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any

from shipway.backends.local import preflight
from shipway.backends.local.dirs import SlotDirs
from shipway.backends.local.generations import read_claims
from shipway.backends.local.records import Route, read_programs, read_routes, write_routes
from shipway.backends.local.render import RouteBody
from shipway.backends.local.state import LocalState
from shipway.backends.protocol import Reporter
from shipway.errors import BackendError
from shipway.release.artifact import Unit


class LocalRoutes(LocalState):
    """The records of hosts, and the router tables made from them."""

    def _apply_route(self, d: SlotDirs, unit: Unit, reporter: Reporter) -> None:
        body = RouteBody.of(unit)
        host, port = body.host, body.router_port
        rec = read_programs(d).get(body.program)
        if rec is None:
            raise BackendError(f"route {host} points at {body.program}, which is not running")
        routes = read_routes(d)
        before = routes.get(host)
        ports = {port} | ({before.router_port} if before else set())
        for p in sorted(ports):  # the router must run before the record says it routes
            self.router(p).ensure(wait=True)
        routes[host] = Route(
            program=body.program,
            process=body.process,
            router_port=port,
            since=self._next_since(port, host),
            unit=unit.digest,
        )
        write_routes(d, routes)

        def undo() -> None:
            routes = read_routes(d)
            if before is None:
                routes.pop(host, None)
            else:
                routes[host] = before
            write_routes(d, routes)

        self._switch(d, ports, undo)
        reporter.line(
            f"  serving http://{host}:{port}/ -> {body.process} {rec.release} "
            f"({', '.join(rec.upstreams)})"
        )
        if not preflight.resolves_here(host):
            reporter.line(f"    {host} does not resolve here: {preflight.curl_hint(host, port)}")

    def _remove_route(self, d: SlotDirs, host: str) -> None:
        """Forget the rolling slot's route of ``host`` and take it off the router."""
        routes = read_routes(d)
        before = routes.pop(host, None)
        write_routes(d, routes)
        if before is not None:
            self._retable(d, [before.router_port])

    def _switch(self, d: SlotDirs, ports: Iterable[int], undo: Callable[[], None]) -> None:
        """After a record moved a host: rewrite and reload the tables on ``ports``. When a
        router does not take it, ``undo`` puts the record back and the tables follow it, so
        no record says a host moved when it may not have."""
        try:
            self._retable(d, ports, must_reload=True)
        except BaseException:
            undo()
            with contextlib.suppress(BackendError, OSError):
                self._retable(d, ports, must_reload=True)
            raise

    def _retable(self, d: SlotDirs, ports: Iterable[int], *, must_reload: bool = False) -> None:
        """Rewrite the slot's table files on these router ports, and reload each router that
        runs (``must_reload``: every one, or an error)."""
        for port in sorted(set(ports)):
            self._write_tables(d, port)
            router = self.router(port)
            if must_reload or router.answering():
                router.reload()

    def _write_tables(self, d: SlotDirs, port: int) -> None:
        """Rewrite the slot's table files for one router port from the records: the rolling
        routes, and one file per generation with claims there (others' files removed)."""
        programs = read_programs(d)
        router = self.router(port)

        def entry(route: Route) -> dict[str, Any]:
            rec = programs.get(route.program)
            out = {
                "program": route.program,
                "upstreams": rec.upstreams if rec else [],
                "since": route.since,
            }
            if route.canary is not None:  # split with a canary by weight (split.py)
                beside = programs.get(str(route.canary["program"]))
                out["canary"] = {**route.canary, "upstreams": beside.upstreams if beside else []}
            return out

        rolling = {h: entry(r) for h, r in read_routes(d).items() if r.router_port == port}
        router.write_table(d.app, d.slot, rolling)
        claimed: set[str] = set()
        for generation, hosts in read_claims(d).items():
            here = {h: entry(c) for h, c in hosts.items() if c.router_port == port}
            if here:
                router.write_table(d.app, d.slot, here, generation)
                claimed.add(generation)
        for generation, path in router.generation_tables(d.app, d.slot).items():
            if generation not in claimed:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def _next_since(self, port: int, host: str) -> float:
        """When a new claim of ``host`` is made: now, and always after every claim the
        router holds for it (a clock step back must not make a new claim lose)."""
        held = self.router(port).table().get(host.lower())
        return max(time.time(), float(held["since"]) + 0.001 if held else 0.0)

    def _refresh_tables(
        self, d: SlotDirs, reporter: Reporter, only_program: str | None = None
    ) -> None:
        """Rewrite and reload the router tables that name a program whose ports changed."""
        named = [*read_routes(d).values()]
        named += [c for hosts in read_claims(d).values() for c in hosts.values()]
        ports = {r.router_port for r in named if only_program in (None, r.program)}
        self._retable(d, ports)

    def _hosts_served_by(self, d: SlotDirs, generation: str) -> list[str]:
        """Hosts the router table says this generation of the slot serves (its claim wins)."""
        served = []
        for host, claim in read_claims(d).get(generation, {}).items():
            held = self.router(claim.router_port).table().get(host.lower())
            if held and (held["app"], held["slot"], held["generation"]) == (
                d.app,
                d.slot,
                generation,
            ):
                served.append(host)
        return sorted(served)
