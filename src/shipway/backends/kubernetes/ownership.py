"""PURE: who owns a live object, when it is not this app's slot.

An object a source wants to apply may already exist, made by someone else: a Helm release
(``meta.helm.sh/release-name``, REFERENCE.md), another tool's field manager (kubectl,
Argo CD, a person's ``kubectl create``), or another shipway app or slot — a slot of the
same app and slot name in another namespace too, for a cluster-scoped object (its
``shipway.io/namespace`` names its slot's namespace). Labels alike are not enough: an
object with this slot's labels that its records do not list as applied is judged by its
field managers (invariant 14). Applying over it
would take its fields behind its owner's back, and the owner's next run would fight back.
So such an object is refused, naming the owner, unless the deploy says ``--take-over``;
then the refusal becomes a line saying whose it was.

Field managers the cluster itself uses (the control plane's ``kube-*``, anything writing
only a subresource such as ``status``) never count as owners.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.sources import SOURCE_APP, SOURCE_NAMESPACE, SOURCE_SLOT

HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"
HELM_ANNOTATIONS = (HELM_RELEASE, HELM_NAMESPACE)
OUR_MANAGERS = frozenset({render.MANAGER, "shipway-scale"})


def owner_of(
    live: Mapping[str, Any],
    app: str,
    slot: str,
    *,
    namespace: str | None = None,
    recorded: bool = True,
) -> str | None:
    """None when the object is this slot's (a source's or shipway's own render), else who
    owns it, in the words a refusal says. ``namespace``: the slot's, when the object is
    cluster-scoped (it must carry it); ``recorded``: whether the slot's records list the
    object as applied (without, this slot's labels alone do not make it the slot's)."""
    meta = live.get("metadata") or {}
    labels = meta.get("labels") or {}
    notes = meta.get("annotations") or {}
    if HELM_RELEASE in notes:
        where = notes.get(HELM_NAMESPACE)
        return f"Helm release {notes[HELM_RELEASE]}" + (f" (namespace {where})" if where else "")
    if SOURCE_APP in labels or SOURCE_SLOT in labels:
        theirs = f"shipway app {labels.get(SOURCE_APP)} slot {labels.get(SOURCE_SLOT)}"
        if (labels.get(SOURCE_APP), labels.get(SOURCE_SLOT)) != (app, slot):
            return theirs
        owned_by = labels.get(SOURCE_NAMESPACE)
        if namespace is not None and owned_by not in (None, namespace):
            return f"{theirs} of namespace {owned_by}"
        if namespace is not None and owned_by is None and not recorded:
            return f"{theirs} of another namespace (no {SOURCE_NAMESPACE} label)"
        if recorded:
            return None
        managers = foreign_managers(live)
        if managers:
            plural = "s" if len(managers) > 1 else ""
            names = ", ".join(managers)
            return f"field manager{plural} {names} (this slot's labels, not applied by it)"
        return None
    if labels.get(render.MANAGED_BY) == render.MANAGER and render.INSTANCE in labels:
        if labels.get(render.INSTANCE) == render.instance_of(app, slot):
            return None
        return f"shipway ({labels[render.INSTANCE]})"
    managers = foreign_managers(live)
    if managers:
        plural = "s" if len(managers) > 1 else ""
        return f"field manager{plural} {', '.join(managers)}"
    return None


def foreign_managers(live: Mapping[str, Any]) -> list[str]:
    """The field managers of the object's own fields (not a subresource's) that are neither
    shipway nor the control plane."""
    entries = (live.get("metadata") or {}).get("managedFields") or []
    found = {
        str(e.get("manager"))
        for e in entries
        if not e.get("subresource")
        and e.get("manager")
        and e.get("manager") not in OUR_MANAGERS
        and not str(e.get("manager")).startswith("kube-")
    }
    return sorted(found)


def helm_marks(live: Mapping[str, Any]) -> list[str]:
    """The Helm ownership annotations a taken-over object still carries (Helm would go on
    treating it as its own: they are removed once it is taken)."""
    notes = (live.get("metadata") or {}).get("annotations") or {}
    return [k for k in HELM_ANNOTATIONS if k in notes]


def edited_since_applied(live: Mapping[str, Any]) -> bool:
    """Whether a field manager other than shipway (and the control plane) wrote the object's
    own fields after shipway last applied it: ``kubectl edit``, ``kubectl scale``'s old
    path, another tool — a change ``observe`` cannot see, since the digest annotation stays
    as shipway wrote it. Read from ``managedFields`` (their times are RFC 3339 to the
    second, so they compare as text; a write in the same second as shipway's apply counts
    as after it: applying again is harmless, missing an edit is not)."""
    entries = (live.get("metadata") or {}).get("managedFields") or []
    ours = [
        str(e.get("time") or "")
        for e in entries
        if e.get("manager") in OUR_MANAGERS and e.get("operation") == "Apply"
    ]
    if not ours:
        return False
    applied = max(ours)
    return any(
        str(e.get("time") or "") >= applied
        for e in entries
        if not e.get("subresource")
        and e.get("manager") not in OUR_MANAGERS
        and not str(e.get("manager", "")).startswith("kube-")
    )
