"""PURE: what differs between two releases (or between the deployed release and what a
deploy would run), and where the target drifted from its record.

Everything comes from release records: the spec snapshot (processes, env, secret
references, config files, routes, the slot's settings, the release command, and any
section added later, such as volumes), the image and its digest, the image metadata, the
secret marks, and what the artifact records of a build (a unit body's ``dependencies``
mapping with a ``digest``). So a diff between two revisions works after their images and
snapshots are gone.

What must never happen: a secret's value in a change. A secret whose value changed is
named, ``(secret) changed``; a secret-bearing config file (one whose content refers to a
secret) is named, never shown. Secret marks are compared, never copied into a change.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shipway.errors import InputError
from shipway.plan.change import APP, NOT_RUNNING, SLOT, Change, ChangeKind, Diff
from shipway.plan.model import Observed
from shipway.plan.objects import object_changes
from shipway.release import history
from shipway.release.artifact import ROUTING, WORKLOAD, Artifact
from shipway.release.model import Release
from shipway.spec.secrets import Masker, Secret, names_in

#: the spec snapshot's sections compared field by field; any other section is compared
#: generically (by its flattened keys)
SECTIONS = ("app", "processes", "env", "secrets", "files", "routes", "slots")
#: slot settings a release does not run with (the guard and the history read them from the
#: current spec), so changing one is no reason to redeploy
SLOT_SETTINGS_NOT_RUN = frozenset({"role", "guarded", "history_limit", "sleep_after"})
#: the app section's settings compared on their own (the image: as the release ran it)
APP_SETTINGS = ("name", "image", "image_type", "release_command")
#: a unified diff of a config file is cut after this many lines
MAX_FILE_DIFF_LINES = 200


def release_diff(before: Release | None, after: Release) -> Diff:
    """Every change from recorded revision ``before`` to recorded revision ``after``."""
    if before is None:
        return Diff(None, after.revision)
    return Diff(before.revision, after.revision, tuple(changes(before, after)))


def plan_diff(
    anchor: Release | None, desired: Release, observed: Observed, mask: Masker | None = None
) -> Diff:
    """What a deploy of ``desired`` changes: against the deployed release's record, and
    wherever the target no longer matches that record (drift). ``mask``: the secret values
    resolved for the plan; no change that holds one is shown."""
    if anchor is None:
        return Diff(None, None)
    found = changes(anchor, desired, mask) + drift(anchor, observed)
    return Diff(anchor.revision, None, tuple(found))


def between(records: Sequence[Release], before: int, after: int | None = None) -> Diff:
    """Revision ``before`` against ``after`` — or, with no ``after``, revision ``before``
    against its predecessor (the highest revision below it that is still recorded)."""

    def find(revision: int) -> Release:
        found = history.find(records, revision)
        if found is None:
            have = ", ".join(f"r{r.revision}" for r in history.ordered(records)) or "none"
            raise InputError(
                f"no revision {revision} in the history (have: {have}; "
                "hint: shipway history SLOT lists them)"
            )
        return found

    if after is None:
        release = find(before)
        return release_diff(predecessor(records, release), release)
    return release_diff(find(before), find(after))


def predecessor(records: Sequence[Release], release: Release) -> Release | None:
    earlier = [r for r in records if r.revision < release.revision]
    return max(earlier, key=lambda r: r.revision) if earlier else None


def history_diffs(records: Sequence[Release]) -> dict[int, Diff]:
    """Each revision against its predecessor (``history --verbose``)."""
    out: dict[int, Diff] = {}
    previous: Release | None = None
    for release in history.ordered(records):
        out[release.revision] = release_diff(previous, release)
        previous = release
    return out


def changes(before: Release, after: Release, mask: Masker | None = None) -> list[Change]:
    """Every change from ``before`` to ``after``; a value that is a secret's (by the
    releases' secret marks, or wherever ``mask`` finds one) is never shown."""
    return hide_secret_values(_changes(before, after), before, after, mask)


def hide_secret_values(
    found: Iterable[Change], before: Release, after: Release, mask: Masker | None = None
) -> list[Change]:
    """``found`` with every change that would show a secret's value masked: a value (a
    plain env value, say) equal to one a secret of that release ran with — known from the
    records alone by the secret marks — or, with ``mask`` (the secrets resolved now: a plan),
    holding one anywhere, in its values or its diff lines."""
    old_marks = set(before.secret_marks.marks.values())
    new_marks = set(after.secret_marks.marks.values())

    def secret(value: Any, salt: str, marks: set[str]) -> bool:
        texts = _texts(value)
        if marks and salt and any(Secret(t).mark(salt) in marks for t in texts):
            return True
        return mask is not None and any(mask(t) != t for t in texts)

    out = []
    for change in found:
        if not change.masked and (
            secret(change.old, before.secret_marks.salt, old_marks)
            or secret(change.new, after.secret_marks.salt, new_marks)
            or (mask is not None and any(mask(line) != line for line in change.lines))
        ):
            change = Change(change.unit, change.field, change.kind, masked=True)
        out.append(change)
    return out


def _texts(value: Any) -> list[str]:
    """The strings a change's value shows (a mapping's and a list's, each)."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _texts(v)]
    return [str(value)]


def _changes(before: Release, after: Release) -> list[Change]:
    a, b = before.spec or {}, after.spec or {}
    out = _image(before, after)
    app_a, app_b = a.get("app") or {}, b.get("app") or {}
    out += _values(APP, {"release command": app_a.get("release_command")},
                   {"release command": app_b.get("release_command")})  # fmt: skip
    # the app's other settings (a build's, say); its image is the release's, compared above
    out += _values(APP, _flat(_without(app_a, APP_SETTINGS)), _flat(_without(app_b, APP_SETTINGS)))
    out += _env(a.get("env") or {}, b.get("env") or {})
    out += _secrets(before, after)
    out += _processes(a.get("processes") or {}, b.get("processes") or {})
    out += _dependencies(before.artifact, after.artifact)
    out += _routes(a.get("routes") or [], b.get("routes") or [])
    out += _files(a.get("files") or {}, b.get("files") or {})
    out += _slot(a.get("slots") or {}, b.get("slots") or {}, after.slot)
    for section in sorted((set(a) | set(b)) - set(SECTIONS)):
        out += _values(section, _flat(a.get(section)), _flat(b.get(section)))
    if _from_source(a, before.slot) or _from_source(b, after.slot):
        # the snapshot names the source, not what it holds: compare the objects themselves
        out += object_changes(before.artifact, after.artifact)
    return out


def _from_source(spec: Mapping[str, Any], slot: str) -> bool:
    """Whether the slot's objects come from a source (manifests, a chart) in this spec."""
    slots = spec.get("slots") or {}
    own = slots.get(slot) if isinstance(slots, Mapping) else None
    return bool(spec.get("source")) or bool(isinstance(own, Mapping) and own.get("source"))


def drift(anchor: Release, observed: Observed) -> list[Change]:
    """Where the target differs from what ``anchor`` records: a unit missing, stopped or
    altered, or one it does not declare — exactly what a repair would change. Only the
    anchor's own generation."""
    seen = observed.of_generation(anchor.generation).units
    out = []
    for unit in anchor.artifact:
        live = seen.get(unit.key)
        if live is None:
            state = "missing"
        elif live.digest != unit.digest:
            state = "altered"
        elif live.state in ("stopped", "created"):  # as a rollout would start it
            state = live.state
        else:
            continue
        out.append(Change(unit.key, "live", "drifted", old=state))
    declared = set(anchor.artifact.keys())
    out += [
        Change(key, "live", "drifted", old="undeclared")
        for key in sorted(seen)
        if key not in declared
    ]
    running = {u.key for u in anchor.artifact if u.phase in (WORKLOAD, ROUTING)}
    missing = {c.unit for c in out if c.old == "missing"}
    if running and len(missing) == len(out) and running == missing:
        # nothing of the release runs, all else in place: a `shipway stop` (or a machine
        # restarted), not a change made behind shipway's back — said as such, once
        return [Change(SLOT, "live", "drifted", old=NOT_RUNNING)]
    return out


# -- the parts -------------------------------------------------------------------------


def _image_ref(release: Release) -> str | None:
    if release.image is None:
        return None
    if release.digest and "@" not in release.image:
        return f"{release.image}@{release.digest}"
    return release.image


def _image(before: Release, after: Release) -> list[Change]:
    out = []
    if before.digest and after.digest:
        same = before.digest == after.digest
    else:
        same = _image_ref(before) == _image_ref(after)
    meta_a, meta_b = before.image_meta, after.image_meta
    local = any(m is not None and m.source_type == "local" for m in (meta_a, meta_b))
    if not same:
        out.append(
            Change(APP, "source" if local else "image", "changed", _image_ref(before),
                   _image_ref(after))
        )  # fmt: skip
    type_a = meta_a.source_type if meta_a else None
    type_b = meta_b.source_type if meta_b else None
    if type_a != type_b:
        out.append(Change(APP, "image type", "changed", type_a, type_b))
    elif not local:  # a local release's working dir is where it was copied from, not what runs
        dir_a = meta_a.working_dir if meta_a else None
        dir_b = meta_b.working_dir if meta_b else None
        if dir_a != dir_b:
            out.append(Change(APP, "working dir", "changed", dir_a, dir_b))
    return out


def _kind(old: Any, new: Any) -> ChangeKind:
    return "added" if old is None else "removed" if new is None else "changed"


def _keyed(
    prefix: str, a: Mapping[str, Any], b: Mapping[str, Any]
) -> Iterable[tuple[str, ChangeKind, Any, Any]]:
    """(field, kind, old, new) for every key that differs, keys sorted."""
    for key in sorted(set(a) | set(b)):
        if key not in a:
            yield f"{prefix}{key}", "added", None, b[key]
        elif key not in b:
            yield f"{prefix}{key}", "removed", a[key], None
        elif a[key] != b[key]:
            yield f"{prefix}{key}", "changed", a[key], b[key]


def _values(unit: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Change]:
    """Plain values compared key by key (None is the same as absent)."""
    a = {k: v for k, v in a.items() if v is not None}
    b = {k: v for k, v in b.items() if v is not None}
    return [Change(unit, f, kind, old, new) for f, kind, old, new in _keyed("", a, b)]


def _without(section: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k not in keys}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys (``resources.limits.memory``); lists stay values."""
    if not isinstance(value, Mapping):
        return {} if value is None else {prefix.rstrip(".") or "value": value}
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, Mapping) and item:
            out.update(_flat(item, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = item
    return out


def _env(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Change]:
    return [Change(APP, f, kind, old, new) for f, kind, old, new in _keyed("env.", a, b)]


def _reference(ref: Any) -> str:
    if isinstance(ref, Mapping):
        if ref.get("from_env"):
            return f"environment variable {ref['from_env']}"
        if ref.get("from_file"):
            return f"file {ref['from_file']}"
    return str(ref)


def _secrets(before: Release, after: Release) -> list[Change]:
    """Secrets as the processes see them (env keys), named and never shown: added,
    removed, their value changed (the marks differ), or their reference changed."""
    refs_a = (before.spec or {}).get("secrets") or {}
    refs_b = (after.spec or {}).get("secrets") or {}
    out = []
    untold = []  # kept by both, but the records cannot tell whether the value changed
    for name in sorted(set(refs_a) | set(refs_b)):
        if name not in refs_a:
            out.append(Change(APP, f"env.{name}", "added", masked=True))
            continue
        if name not in refs_b:
            out.append(Change(APP, f"env.{name}", "removed", masked=True))
            continue
        if refs_a[name] != refs_b[name]:
            out.append(
                Change(APP, f"secrets.{name}", "changed", _reference(refs_a[name]),
                       _reference(refs_b[name]))
            )  # fmt: skip
        same = before.secret_marks.same(after.secret_marks, name)
        if same is False:
            out.append(Change(APP, f"env.{name}", "changed", masked=True))
        elif same is None:
            untold.append(name)
    if untold and not out and _only_secrets_explain(before, after):
        # a record older than marks: the config hash says some secret's value changed
        out.append(Change(APP, "env." + "/".join(untold), "changed", masked=True))
    return out


def _only_secrets_explain(before: Release, after: Release) -> bool:
    """The config hashes differ while env and files are the same: a secret's value
    changed (the hash covers env, files and each secret's digest)."""
    a, b = before.spec or {}, after.spec or {}
    return (
        bool(before.config_hash and after.config_hash)
        and before.config_hash != after.config_hash
        and (a.get("env") or {}) == (b.get("env") or {})
        and (a.get("files") or {}) == (b.get("files") or {})
    )


def _processes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Change]:
    out = []
    for name in [*b, *(n for n in a if n not in b)]:
        if name not in a:
            out.append(Change(name, "process", "added", new=_flat(b[name])))
        elif name not in b:
            out.append(Change(name, "process", "removed", old=_flat(a[name])))
        elif a[name] != b[name]:
            out += _values(name, _flat(a[name]), _flat(b[name]))
    return out


def _dependencies(a: Artifact, b: Artifact) -> list[Change]:
    """Builds the artifact records (a unit body's ``dependencies.digest``), per process."""

    def built(artifact: Artifact) -> dict[str, str]:
        out = {}
        for unit in artifact:
            deps = unit.body.get("dependencies")
            if isinstance(deps, Mapping) and deps.get("digest"):
                out[unit.process or APP] = str(deps["digest"])
        return out

    old, new = built(a), built(b)
    return [
        Change(unit, "dependencies", _kind(old.get(unit), new.get(unit)), old.get(unit),
               new.get(unit))
        for unit in sorted(set(old) | set(new))
        if old.get(unit) != new.get(unit)
    ]  # fmt: skip


def _routes(a: list[Any], b: list[Any]) -> list[Change]:
    def by_host(routes: list[Any]) -> dict[str, dict[str, Any]]:
        return {
            str(r.get("host")): {k: v for k, v in r.items() if k != "host"}
            for r in routes
            if isinstance(r, Mapping)
        }

    old, new = by_host(a), by_host(b)
    out = []
    for host in sorted(set(old) | set(new)):
        unit = f"route {host}"
        if host not in old:
            out.append(Change(unit, "route", "added", new=new[host]))
        elif host not in new:
            out.append(Change(unit, "route", "removed", old=old[host]))
        else:
            out += _values(unit, old[host], new[host])
    return out


def _files(a: Mapping[str, str], b: Mapping[str, str]) -> list[Change]:
    out = []
    for path in sorted(set(a) | set(b)):
        old, new = a.get(path), b.get(path)
        if old == new:
            continue
        kind = _kind(old, new)
        unit = f"file {path}"
        if names_in(old or "") or names_in(new or ""):
            out.append(Change(unit, "content", kind, masked=True))
        else:
            out.append(Change(unit, "content", kind, lines=_unified(old or "", new or "")))
    return out


def _unified(old: str, new: str) -> tuple[str, ...]:
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2)
    lines = list(diff)[2:]  # not the ---/+++ header: the change's headline names the file
    if len(lines) > MAX_FILE_DIFF_LINES:
        rest = len(lines) - MAX_FILE_DIFF_LINES
        lines = [*lines[:MAX_FILE_DIFF_LINES], f"… {rest} more lines"]
    return tuple(lines)


def _slot(a: Mapping[str, Any], b: Mapping[str, Any], name: str) -> list[Change]:
    """The slot's settings key by key; a table (``canary``, ``acme``) by its own keys
    (``canary.step_time``), so a change names what changed, not both tables whole."""

    def settings(slots: Mapping[str, Any]) -> dict[str, Any]:
        own = slots.get(name) or {}
        return _flat({k: v for k, v in own.items() if k not in SLOT_SETTINGS_NOT_RUN})

    return _values(SLOT, settings(a), settings(b))
