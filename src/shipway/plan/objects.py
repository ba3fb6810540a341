"""PURE: what differs between two artifacts, object by object — for a slot whose objects
come from a source (the team's manifests, a chart), where the spec snapshot names the
source but not what it holds, so comparing snapshots alone would call a changed manifest
"no changes".

A unit whose digest differs is ``changed``; one only in ``after`` is ``added``, one only in
``before`` ``removed``. A Secret's change is masked (its data is never shown; its units
hold placeholders anyway).
"""

from __future__ import annotations

from shipway.plan.change import Change, ChangeKind
from shipway.release.artifact import Artifact


def object_changes(before: Artifact, after: Artifact) -> list[Change]:
    old = {u.key: u for u in before}
    new = {u.key: u for u in after}
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        kind: ChangeKind = "added" if a is None else "removed" if b is None else "changed"
        if a is not None and b is not None and a.digest == b.digest:
            continue
        secret = (a or b).kind == "Secret"  # type: ignore[union-attr]
        out.append(Change(key, "content", kind, masked=secret))
    return out
