"""The generations of a blue-green local slot and the hosts they claim: two state files.

``<app>/<slot>/generations.json``: ``{"version": 1, "generations": {name: Generation}}``.
A generation is its snapshot plus its programs (in ``programs.json``, labelled with it). It
exists until ``gc`` deletes it; its snapshot is never pruned meanwhile. Asleep, its
programs keep their records (and env template) with no instance.

``<app>/<slot>/claims.json``: ``{"version": 1, "claims": {generation: {host: Route}}}``. A
claim is a host pointed at a program of the generation. Each generation's claims are its
own router table file, and the router serves a host from its newest claim
(:mod:`.routetable`); so within the slot, the generation holding the newest claim of a host
is the one serving it, and an older claim left behind loses.

Both files are versioned like every record file (:class:`.model.RecordFile`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shipway.backends.local.dirs import SlotDirs
from shipway.backends.local.records import RecordFile, Route, SnapshotRecord

#: generation -> host -> its claim
Claims = dict[str, dict[str, Route]]


@dataclass(frozen=True)
class Generation(SnapshotRecord):
    """A generation of the slot: its own snapshot, and when it was made (its age and
    order; a redeploy of its snapshot keeps it)."""

    created_at: str = ""

    @classmethod
    def of(cls, snap: SnapshotRecord, created_at: str) -> Generation:
        return cls(snap.unit, snap.revision, snap.dir, snap.digest, created_at)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Generation:
        return cls.of(SnapshotRecord.from_json(doc), str(doc["created_at"]))

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "created_at": self.created_at}


def _hosts(doc: Mapping[str, Any]) -> dict[str, Route]:
    return {str(h): Route.from_json(c) for h, c in dict(doc).items()}


def _dump_hosts(hosts: Mapping[str, Route]) -> dict[str, Any]:
    return {h: c.to_json() for h, c in hosts.items()}


GENERATIONS: RecordFile[Generation] = RecordFile(
    "generations", Generation.from_json, Generation.to_json
)
CLAIMS: RecordFile[dict[str, Route]] = RecordFile("claims", _hosts, _dump_hosts)


def read_generations(d: SlotDirs) -> dict[str, Generation]:
    return GENERATIONS.read(d.generations)


def write_generations(d: SlotDirs, generations: Mapping[str, Generation]) -> None:
    GENERATIONS.write(d.generations, generations)


def read_claims(d: SlotDirs) -> Claims:
    return CLAIMS.read(d.claims)


def write_claims(d: SlotDirs, claims: Claims) -> None:
    CLAIMS.write(d.claims, {g: hosts for g, hosts in claims.items() if hosts})


def claimed_ports(claims: Claims) -> set[int]:
    """The router ports the claims are made on."""
    return {c.router_port for hosts in claims.values() for c in hosts.values()}


def serving(claims: Claims) -> dict[str, tuple[str, Route]]:
    """host -> (generation, claim): the slot's newest claim of each host."""
    out: dict[str, tuple[str, Route]] = {}
    for generation, hosts in sorted(claims.items()):
        for host, claim in hosts.items():
            held = out.get(host)
            if held is None or claim.since > held[1].since:
                out[host] = (generation, claim)
    return out


def live_generation(claims: Claims) -> str | None:
    """The generation the slot's hosts point at: the one holding the newest serving claim."""
    newest = sorted(serving(claims).values(), key=lambda gc: gc[1].since)
    return newest[-1][0] if newest else None
