"""The generations of a blue-green local slot and the hosts they claim: two state files.

``<app>/<slot>/generations.json``: name -> ``{"created_at", "revision", "snapshot",
"digest", "unit"}``. A generation is its snapshot plus its programs (in ``programs.json``,
labelled with it). It exists until ``gc`` deletes it; its snapshot is never pruned
meanwhile. Asleep, its programs keep their records (and env template) with no instance.

``<app>/<slot>/claims.json``: generation -> host -> ``{"program", "process",
"router_port", "since"}``. A claim is a host pointed at a program of the generation. Each
generation's claims are its own router table file, and the router serves a host from its
newest claim (:mod:`.routetable`); so within the slot, the generation holding the newest
claim of a host is the one serving it, and an older claim left behind loses.
"""

from __future__ import annotations

from typing import Any

from shipway.backends.local.dirs import SlotDirs, read_json, write_json

Claims = dict[str, dict[str, dict[str, Any]]]


def read_generations(d: SlotDirs) -> dict[str, dict[str, Any]]:
    doc = read_json(d.generations, {}) or {}
    return {str(k): dict(v) for k, v in dict(doc.get("generations", {})).items()}


def write_generations(d: SlotDirs, generations: dict[str, dict[str, Any]]) -> None:
    write_json(d.generations, {"generations": generations})


def read_claims(d: SlotDirs) -> Claims:
    doc = read_json(d.claims, {}) or {}
    return {
        str(g): {str(h): dict(c) for h, c in dict(hosts).items()}
        for g, hosts in dict(doc.get("claims", {})).items()
    }


def write_claims(d: SlotDirs, claims: Claims) -> None:
    write_json(d.claims, {"claims": {g: hosts for g, hosts in claims.items() if hosts}})


def serving(claims: Claims) -> dict[str, tuple[str, dict[str, Any]]]:
    """host -> (generation, claim): the slot's newest claim of each host."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for generation, hosts in sorted(claims.items()):
        for host, claim in hosts.items():
            held = out.get(host)
            if held is None or float(claim.get("since", 0)) > float(held[1].get("since", 0)):
                out[host] = (generation, claim)
    return out


def live_generation(claims: Claims) -> str | None:
    """The generation the slot's hosts point at: the one holding the newest serving claim."""
    newest = sorted(serving(claims).values(), key=lambda gc: float(gc[1].get("since", 0)))
    return newest[-1][0] if newest else None
