"""PURE: what the objects of a slot's namespace say about its generations and hosts.

A generation is a set of objects in the slot's namespace labelled
``shipway.io/generation: <name>``; a host is one Ingress of the slot, labelled
``shipway.io/routes-to: <generation>`` with the generation's Service as its backend.
Functions over object dicts (``obj.to_dict()``), so they are tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from shipway.backends.kubernetes.render import (
    GENERATION,
    INSTANCE,
    MANAGED_BY,
    MANAGER,
    NAME,
    ROUTES_TO,
)
from shipway.backends.protocol import GenerationInfo, HostOwner
from shipway.release import history
from shipway.release.model import Release

Obj = Mapping[str, Any]


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def labels_of(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def generation_of(obj: Obj) -> str | None:
    return labels_of(obj).get(GENERATION)


def routes_to(ingress: Obj) -> str | None:
    return labels_of(ingress).get(ROUTES_TO)


def serves(ingress: Obj, host: str) -> bool:
    rules = (ingress.get("spec") or {}).get("rules") or []
    return any(str(r.get("host", "")).lower() == host.lower() for r in rules)


def backends_of(ingress: Obj) -> set[str]:
    """The Services an Ingress sends traffic to."""
    names: set[str] = set()
    for rule in (ingress.get("spec") or {}).get("rules") or []:
        for path in (rule.get("http") or {}).get("paths") or []:
            service = (path.get("backend") or {}).get("service") or {}
            if service.get("name"):
                names.add(str(service["name"]))
    return names


def without_host(ingress: Obj, host: str) -> tuple[list[Any], list[Any]]:
    """An Ingress's rules and TLS entries once ``host`` is taken out of it."""
    spec = ingress.get("spec") or {}
    rules = [r for r in spec.get("rules") or [] if str(r.get("host", "")).lower() != host.lower()]
    tls = []
    for entry in spec.get("tls") or []:
        hosts = [h for h in entry.get("hosts") or [] if str(h).lower() != host.lower()]
        if hosts:
            tls.append({**entry, "hosts": hosts})
    return rules, tls


def where(ingress: Obj) -> str:
    meta = _meta(ingress)
    return f"Ingress {meta.get('namespace', '')}/{meta.get('name', '')}"


def owner_of(ingress: Obj, ours: tuple[str, str, str] | None = None) -> HostOwner:
    """Who an Ingress says it belongs to: shipway's labels name the app and slot (the slot
    is the instance label without the app's prefix); anything else is named by its place.
    ``ours``: (app, slot, namespace) of the slot asking. The same app and slot names in
    another namespace are another deployment of them — another owner, and named so, since
    the engine takes a host from its own slot without asking."""
    labels = labels_of(ingress)
    app, instance = labels.get(NAME), labels.get(INSTANCE, "")
    namespace = str(_meta(ingress).get("namespace", ""))
    if labels.get(MANAGED_BY) == MANAGER and app:
        slot = instance.removeprefix(f"{app}-") if instance.startswith(f"{app}-") else instance
        if ours is not None and (app, slot) == ours[:2] and namespace != ours[2]:
            slot = f"{slot} (namespace {namespace})"
        return HostOwner(app, slot or "?", routes_to(ingress), where(ingress))
    return HostOwner("unmanaged", namespace, None, f"{where(ingress)}, not made by shipway")


def is_ours(ingress: Obj, app: str, instance: str, namespace: str) -> bool:
    labels = labels_of(ingress)
    return (
        _meta(ingress).get("namespace") == namespace
        and labels.get(NAME) == app
        and labels.get(INSTANCE) == instance
    )


def live_generation(
    routed: Sequence[str], records: Sequence[Release], awake: Iterable[str]
) -> str | None:
    """The generation the slot's hosts route to (the deployed release's, when hosts are
    split between generations after an interruption); with no routed host, the deployed
    release's generation while it runs (an app without hosts)."""
    deployed = history.deployed(records)
    wanted = deployed.generation if deployed is not None else None
    if routed:
        if wanted in routed:
            return wanted
        return max(set(routed), key=lambda g: (routed.count(g), g))
    return wanted if wanted in set(awake) else None


def _made_in(name: str) -> tuple[str, int]:
    """An order for generations the API server stamped in the same second (its timestamps
    have no finer grain): their names, ``<slot>-<YYYYMMDD-HHMMSS>`` then ``-2``, ``-3`` …
    for the next ones made in that second, in the order they were made."""
    base, _, n = name.rpartition("-")
    if base and n.isdigit() and len(n) < 6:
        return base, int(n)
    return name, 1


def generation_infos(
    objects: Iterable[Obj],
    deployments: Iterable[Obj],
    ingresses: Iterable[Obj],
    records: Sequence[Release],
) -> list[GenerationInfo]:
    """Every generation any object names, oldest first: created when its first object was,
    awake when a Deployment of it asks for pods, live as :func:`live_generation` says."""
    created: dict[str, str] = {}
    for obj in [*objects, *deployments]:
        gen = generation_of(obj)
        stamp = str(_meta(obj).get("creationTimestamp") or "")
        if gen:
            created[gen] = min(created.get(gen, stamp) or stamp, stamp)
    awake = {
        g
        for d in deployments
        if (g := generation_of(d)) and int((d.get("spec") or {}).get("replicas") or 0) > 0
    }
    routed = [g for i in ingresses if (g := routes_to(i))]
    live = live_generation(routed, records, awake)
    out = []
    for name, stamp in sorted(created.items(), key=lambda kv: (kv[1], *_made_in(kv[0]))):
        ran = [r.revision for r in records if r.generation == name]
        state: Literal["live", "awake", "asleep"] = (
            "live" if name == live else "awake" if name in awake else "asleep"
        )
        out.append(GenerationInfo(name, state, max(ran) if ran else None, stamp))
    return out
