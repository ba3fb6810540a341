"""A canary on Docker hosts: each host's shared Caddy splits the slot's routes by weight, and
its access log counts the answers per release; shipway sums them over every host.

Setting a share writes a ``canary`` beside each route unit the new release moves, in this
slot's part of every host's proxy files (``slots.json``, :mod:`.caddy_canary`), under the
proxy's lock — the same switch as a route's. A route in the proxy's entries is split by
their files alone (no reload); another one's split is in the config (a graceful reload).
The route itself still names the stable release, so whatever stops a canary halfway (an
abort, a ``kill -9``) leaves a route that observing reports as drifted: the undo, or the
next run's recovery, applies the recorded route again — 100 % to one release, the canary's
requests logged no more.

The counts: every request of a canary's route is a JSON line of the proxy's access log
(its container's stdout), read through the Engine API from every host, from where the last
read stopped (the log's own timestamps), and tallied per release here. The engine's and a
person's notes about the canary are files in a holder container on the slot's first host
(created once, never started), as the records are kept there. Nothing here decides.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from secrets import token_urlsafe
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from shipway.backends.canary import CanaryCounts, canary_id
from shipway.backends.docker import caddy, caddy_canary, labels
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.edge import edge
from shipway.backends.docker.proxy import DockerProxy
from shipway.backends.docker.records import holder_made, read_tree, read_tree_of, tar_of
from shipway.backends.protocol import Reporter
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.plan.canary import Tally
from shipway.release.artifact import Unit
from shipway.release.model import Release
from shipway.spec.canary import answer_timeout_entry
from shipway.spec.model import Target

NOTES = ("state", "decision")
NOTES_KIND = "canary-notes"
NOTES_DIR = "/etc"
#: the latency histogram of the counts (as the local router's: 1 ms, growing by 1.25x)
BASE, GROWTH, BUCKETS = 0.001, 1.25, 64
#: how long the canary entries read from a host's proxy are taken as current (they change
#: only by a share set, which forgets them here, or by a person's abort elsewhere)
ENTRIES_FOR = 1.0
#: how far before the canary's start its proxy's log is read (the hosts' clocks)
LOG_MARGIN = 2.0
#: the proxy's log lines a read of the counts asks for first (then 4 times as many, until
#: the answer holds fewer): the engine's ``since`` alone decodes the whole log file to find
#: where to start, at each read, ten a second; its ``tail`` reads back from the end
#: (bench/docker_canary_log.py: 77 ms of the engine's CPU a read of a 6.3 MB log, 2.2 ms)
TAIL_FIRST = 256


def bucket(seconds: float) -> int:
    if seconds < BASE:
        return 0
    return min(BUCKETS - 1, 1 + int(math.log(seconds / BASE, GROWTH)))


class HostTally:
    """One host's counts of one canary, per side, and where its log was read up to."""

    def __init__(self) -> None:
        self.rows: dict[str, list[Any]] = {}
        self.last_ns = 0

    def count(self, side: str, line: Mapping[str, Any]) -> None:
        row = self.rows.setdefault(side, [0, 0, 0, [0] * BUCKETS])
        row[0] += 1
        upstream_status = line.get(caddy_canary.FIELD_STATUS)
        status = int(line.get("status") or 0)
        if isinstance(upstream_status, int):
            if upstream_status >= 500:
                row[1] += 1
        elif status >= 500:  # no upstream answered: the proxy's own 502/503/504
            row[2] += 1
            return
        row[3][bucket(float(line.get("duration") or 0.0))] += 1


def _ns(stamp: bytes) -> int:
    """A Docker log timestamp (RFC 3339, nanoseconds, UTC) as nanoseconds since the epoch."""
    text = stamp.decode()
    whole, _, frac = text.rstrip("Z").partition(".")
    seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return int(seconds) * 1_000_000_000 + int((frac + "000000000")[:9])


class DockerCanaries(DockerProxy):
    """The canary's share in every host's proxy, its counts from their access logs."""

    def _canary_state(self) -> dict[str, Any]:
        state: dict[str, Any] | None = self.__dict__.get("_canary_cache")
        if state is None:
            state = self.__dict__["_canary_cache"] = {
                "entries": {},  # host -> (read at, {route key: canary})
                "tallies": {},  # (host, canary id) -> HostTally
                "lock": threading.Lock(),
            }
        return state

    def _this_proxy(self, client: docker.DockerClient) -> Container | None:
        proxy = self._get(client, labels.shared_proxy(self.settings.proxy_port))
        return proxy if proxy is not None and proxy.status == "running" else None

    def shift_traffic(
        self, clearance: Clearance, target: Target, release: Release, percent: int, r: Reporter
    ) -> None:
        self._guard(clearance, target)
        ident = canary_id(release)
        # one cookie secret on every host (the containers' names are the same on each, so a
        # client's cookie keeps its release behind any of them); a canary keeps its own
        secret = token_urlsafe(16)
        # said in the entry only when set (the config's default is the spec's)
        patience = answer_timeout_entry(release.spec, release.slot)
        wanted: dict[str, dict[str, Unit]] = {}  # host -> route key -> the new release's
        for unit in release.artifact:
            if unit.kind == "route" and percent > 0:
                wanted.setdefault(unit.host or self.primary, {})[unit.key] = unit

        def on_host(conn: HostConnection) -> list[str]:
            host = conn.name
            client = self._client(host)
            proxy = self._this_proxy(client)
            if proxy is None:
                return []
            moved: list[str] = []
            mine = self._owner
            # only where the canary's containers run: with a ``batch`` smaller than the
            # hosts, a later batch's host has none yet (its route switches when it rolls)
            here = {
                key: [str(u) for u in unit.body["upstreams"]]
                for key, unit in wanted.get(host, {}).items()
                if all(
                    self._running(client, str(u).rsplit(":", 1)[0]) for u in unit.body["upstreams"]
                )
            }
            # the alias that names exactly the canary's containers here: its route's entries
            # then split by files alone, no reload (:mod:`.caddy_canary`)
            groups = {key: self._group_of(client, wanted[host][key]) for key in here}

            def change(routes: dict[str, Any]) -> None:
                moved.clear()  # run twice: to see whether anything changes, then to change
                for key, entry in list(routes.items()):
                    new = here.get(key)
                    held = [str(u) for u in (entry.get("body") or {}).get("upstreams") or []]
                    if new is None or new == held:
                        if entry.get("canary"):
                            routes[key] = {k: v for k, v in entry.items() if k != "canary"}
                        continue
                    before = entry.get("canary") or {}
                    same = before.get("id") == ident
                    routes[key] = {
                        **entry,
                        "canary": {
                            "id": ident,
                            "upstreams": new,
                            "weight": percent,
                            "secret": before["secret"] if same else secret,
                            "since": before["since"] if same else time.time(),
                            **({"group": groups[key]} if groups.get(key) else {}),
                            **patience,
                        },
                    }
                    hosts = ", ".join((entry.get("body") or {}).get("hosts") or []) or key
                    moved.append(f"{hosts} on {host}")

            with edge(f"host {host}: set the canary's share to {percent}%"):
                parts = caddy.parse_parts(read_tree(proxy, caddy.CONFIG_DIR))
                probe = dict(parts.get(mine, {}))
                change(probe)
                if probe != parts.get(mine, {}):
                    self._reconfigure(host, client, proxy, change)
                    self._switched_at[host] = time.monotonic()
            return moved

        moved = [m for done in self._each_host(on_host).values() for m in done]
        self._canary_state()["entries"].clear()
        if moved:
            r.line(f"  {percent}% of {', '.join(sorted(moved))} to r{release.revision}")
        elif percent == 0:
            r.line("  every request to the stable release (the canary's share is 0)")

    def _running(self, client: docker.DockerClient, name: str) -> bool:
        container = self._get(client, name)
        return container is not None and container.status == "running"

    def _entries(self, host: str) -> dict[str, dict[str, Any]]:
        """The canaries of this slot's routes in the host's proxy (route key → canary),
        read at most every :data:`ENTRIES_FOR` seconds."""
        state = self._canary_state()
        at, entries = state["entries"].get(host, (0.0, None))
        if entries is not None and time.monotonic() - at < ENTRIES_FOR:
            return dict(entries)
        client = self._client(host)
        name = labels.shared_proxy(self.settings.proxy_port)
        tree = read_tree_of(client, name, f"{caddy.CONFIG_DIR}/{caddy.PARTS_FILE}")
        part = caddy.parse_parts(tree).get(self._owner, {})
        entries = {k: dict(e["canary"]) for k, e in part.items() if e.get("canary")}
        state["entries"][host] = (time.monotonic(), entries)
        return dict(entries)

    def canary_counts(self, target: Target) -> CanaryCounts | None:
        self._serves(target)

        def on_host(conn: HostConnection) -> tuple[dict[str, Any], HostTally | None]:
            with edge(f"host {conn.name}: read the canary's counts"):
                entries = self._entries(conn.name)
                if not entries:
                    return {}, None
                first = entries[min(entries)]
                return first, self._read_log(conn.name, first, entries)

        found = self._each_host(on_host)
        canaries = [(c, t) for c, t in found.values() if c]
        if not canaries:
            return None
        first = canaries[0][0]
        ident = str(first["id"])
        sides: dict[str, Tally] = {"stable": Tally(), "canary": Tally()}
        for c, tally in canaries:
            if tally is None or str(c["id"]) != ident:
                continue
            for side, (requests, s5xx, failures, hist) in tally.rows.items():
                sides[side] = _plus(sides[side], Tally(requests, s5xx, failures, tuple(hist)))
        return CanaryCounts(
            canary=ident,
            percent=int(first.get("weight", 0)),
            stable=sides["stable"],
            on_canary=sides["canary"],
        )

    def _read_log(
        self, host: str, canary: Mapping[str, Any], entries: Mapping[str, Mapping[str, Any]]
    ) -> HostTally:
        """The host's counts of ``canary``: its proxy's access log read on from where the
        last read of it stopped."""
        ident = str(canary["id"])
        state = self._canary_state()
        with state["lock"]:
            tally: HostTally = state["tallies"].setdefault((host, ident), HostTally())
        on_canary = {str(u) for e in entries.values() for u in e.get("upstreams") or []}
        client = self._client(host)
        since = float(canary.get("since", 0)) - LOG_MARGIN
        if tally.last_ns:
            since = max(since, tally.last_ns / 1e9 - 0.001)
        name = labels.shared_proxy(self.settings.proxy_port)
        try:
            rows = log_since(client, name, since)
        except docker.errors.NotFound:
            return tally
        for row in rows:
            stamp, _, text = row.partition(b" ")
            if not text.startswith(b"{"):
                continue
            try:
                ns = _ns(stamp)
                line = json.loads(text)
            except ValueError:
                continue
            if ns <= tally.last_ns or line.get(caddy_canary.FIELD_ID) != ident:
                continue
            tally.last_ns = ns
            side = line.get(caddy_canary.FIELD_SIDE)
            if side not in caddy_canary.SIDES:  # a route split in the config: by upstream
                side = "canary" if line.get(caddy_canary.FIELD_UPSTREAM) in on_canary else "stable"
            tally.count(side, line)
        return tally

    # -- notes ---------------------------------------------------------------------------

    def canary_note(
        self, clearance: Clearance, target: Target, name: str, doc: Mapping[str, Any] | None
    ) -> None:
        self._guard(clearance, target)
        path = _note_file(name)
        client = self._client(self.primary)
        data = b"" if doc is None else json.dumps(dict(doc), sort_keys=True).encode()
        holder = self._notes_holder()
        with edge(f"host {self.primary}: write the canary's {name} note"):
            # written into the notes container as it is; made first only when it is missing
            try:
                client.api.put_archive(holder, NOTES_DIR, tar_of({path: (data, 0o600)}))
                return
            except docker.errors.NotFound:
                if doc is None:
                    return  # no notes container: nothing to clear
            self._make_notes_holder(client)
            client.api.put_archive(holder, NOTES_DIR, tar_of({path: (data, 0o600)}))

    def read_canary_note(self, target: Target, name: str) -> dict[str, Any] | None:
        self._serves(target)
        path = _note_file(name)
        client = self._client(self.primary)
        with edge(f"host {self.primary}: read the canary's {name} note"):
            # no notes container (or no such note in it) reads as none: one call, no look first
            found = read_tree_of(client, self._notes_holder(), f"{NOTES_DIR}/{path}")
            raw = found.get(path, (b"", 0))[0]
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:  # written this moment: as if not yet
            return None
        return doc if isinstance(doc, dict) else None

    def _notes_holder(self) -> str:
        """The name of the slot's notes container (on the first host)."""
        return f"{labels.prefix(self.app.name, self.slot.name)}-canary-notes"

    def _make_notes_holder(self, client: docker.DockerClient) -> None:
        """Make the slot's notes container (one made by another process this moment is
        the same)."""
        tags = labels.base(self.app.name, self.slot.name, NOTES_KIND)
        try:
            holder_made(
                client,
                lambda: client.api.create_container(
                    labels.HOLDER_IMAGE, name=self._notes_holder(), labels=tags
                ),
            )
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise


def _note_file(name: str) -> str:
    if name not in NOTES:
        raise InputError(f"no canary note {name!r} (known: {', '.join(NOTES)})")
    return f"canary-{name}.json"


def _plus(a: Tally, b: Tally) -> Tally:
    width = max(len(a.latency), len(b.latency))
    left = list(a.latency) + [0] * (width - len(a.latency))
    right = list(b.latency) + [0] * (width - len(b.latency))
    return Tally(
        a.requests + b.requests,
        a.status_5xx + b.status_5xx,
        a.failures + b.failures,
        tuple(x + y for x, y in zip(left, right, strict=True)),
    )


def log_since(client: docker.DockerClient, container: str, since: float) -> list[bytes]:
    """The container's stdout lines (each with its timestamp) logged after ``since`` (a
    Unix time), read from the end of its log: the last :data:`TAIL_FIRST` lines after
    ``since``, then four times as many while the answer is that many lines long (it may
    have left earlier ones out). Fewer lines than asked for are all there are."""
    tail = TAIL_FIRST
    while True:
        raw = client.api.logs(
            container, stdout=True, stderr=False, timestamps=True, since=since, tail=tail
        )
        rows = bytes(raw).splitlines()
        if len(rows) < tail:
            return rows
        tail *= 4
