"""Saying when data would be lost: files the running release wrote inside its own copy of
the app (its snapshot, its container) at run time are not in the next release — a SQLite
database beside the code, uploads in ``media/``. A deploy reads them from the backend before
it replaces anything and, once it rolled, warns naming them and the fix (a volume).

What must never happen: the warning turning a success into a failure, or a read error
hiding that the question could not be answered (it is said instead).
"""

from __future__ import annotations

from shipway.backends.protocol import Backend
from shipway.errors import BackendError
from shipway.release.model import Release
from shipway.spec.model import Target

SHOWN = 10


def runtime_files_warning(
    backend: Backend, target: Target, anchor: Release | None, release: Release
) -> str | None:
    """The warning for what ``anchor`` wrote inside itself (None: nothing, or no anchor, or
    a backend that cannot tell — its docs say so)."""
    if anchor is None:
        return None
    try:
        found = backend.runtime_files(target, anchor)
    except BackendError as exc:
        return (
            f"could not tell whether r{anchor.revision} wrote files inside its own copy of "
            f"the app, which r{release.revision} would not have: {exc}"
        )
    if not found:
        return None
    shown = ", ".join(found[:SHOWN])
    if len(found) > SHOWN:
        shown += f" and {len(found) - SHOWN} more"
    top = found[0].split("/", 1)[0]
    return (
        f"r{anchor.revision} wrote {len(found)} file(s) at run time inside its own copy of "
        f"the app, which r{release.revision} does not have: {shown} — whatever they hold is "
        f"lost to r{release.revision} (fix: declare a volume for that data, e.g. "
        f'[volumes.data] path = "{top}", so it outlives every release)'
    )
