"""Saying when data would be lost: files the running release wrote inside its own copy of
the app (its snapshot, its container) at run time are not in the next release — a SQLite
database beside the code, uploads in ``media/``. A deploy reads them from the backend before
it replaces anything and, once it rolled, warns naming them and the fix (a volume). What
``.shipwayignore`` names is not warned about (the team said it is not the app's), nor, on
the local backend, what the release command wrote (build output), unless it is a database.

A database file in the app's directory itself (a SQLite ``db.sqlite3`` beside the code) is
copied into every release, and each deploy replaces the running release's copy: a local
deploy's plan warns about it, with the fix (:func:`database_notes`).

What must never happen: the warning turning a success into a failure, or a read error
hiding that the question could not be answered (it is said instead).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from shipway.backends.appfiles import ignored_by
from shipway.backends.protocol import Backend
from shipway.errors import BackendError
from shipway.release.model import Release
from shipway.spec.model import App, Target
from shipway.spec.volumes import DATABASE_SUFFIXES, database_fix

SHOWN = 10


class WrittenInside:
    """What ``anchor`` wrote inside itself, read by the backend in a thread of its own from
    the moment this is made: beside the observation and the plan (on Docker a diff of every
    container of the anchor, on every host), so no step waits for it. :meth:`warning`
    waits for the answer; it is asked before the first step replaces anything."""

    def __init__(
        self, backend: Backend, target: Target, anchor: Release | None, app: App | None = None
    ) -> None:
        """``app``: the spec deployed now, whose ``.shipwayignore`` says what is not data."""
        self.anchor = anchor
        self.app = app
        self._found: list[str] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if anchor is not None:

            def read() -> None:
                try:
                    self._found = backend.runtime_files(target, anchor)
                except BaseException as exc:  # given to the caller of warning()
                    self._error = exc

            self._thread = threading.Thread(target=read, name="shipway-runtime-files", daemon=True)
            self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def warning(self, release: Release) -> str | None:
        """The warning for ``release`` (None: nothing written, no anchor, or a backend that
        cannot tell — its docs say so). A read the backend could not make (BackendError)
        is said in the warning, not raised; any other error is raised here."""
        anchor = self.anchor
        if anchor is None:
            return None
        self.join()
        if isinstance(self._error, BackendError):
            return (
                f"could not tell whether r{anchor.revision} wrote files inside its own copy "
                f"of the app, which r{release.revision} would not have: {self._error}"
            )
        if self._error is not None:
            raise self._error
        found = self._not_ignored(self._found or [])
        if not found:
            return None
        shown = ", ".join(found[:SHOWN])
        if len(found) > SHOWN:
            shown += f" and {len(found) - SHOWN} more"
        named = [f for f in found if f.endswith(DATABASE_SUFFIXES)]
        if named:
            shown += f" ({', '.join(named[:SHOWN])}: a database)"
        first = (named or found)[0]
        if "/" in first:  # a directory of the app: the volume is that directory
            top = first.split("/")[0]
            fix = (
                f'declare a volume for that data, e.g. [volumes.data] path = "{top}", so it '
                "outlives every release"
            )
        else:  # a file beside the code: a volume is a directory, never a single file
            fix = database_fix(first)
        return (
            f"r{anchor.revision} wrote {len(found)} file(s) at run time inside its own copy of "
            f"the app, which r{release.revision} does not have: {shown} — whatever they hold "
            f"is lost to r{release.revision} (fix: {fix}; what is not data: name it in "
            ".shipwayignore)"
        )

    def _not_ignored(self, found: list[str]) -> list[str]:
        """``found`` without what the app's ``.shipwayignore`` names."""
        if self.app is None:
            return found
        ignored = ignored_by(self.app.source_dir)
        if ignored is None:
            return found
        return [f for f in found if not ignored.match_file(f)]


def database_notes(databases: Sequence[str]) -> list[str]:
    """The plan's warning about each database file a release carries from the app's
    directory (``ResolvedImage.databases``): each deploy replaces the running release's copy."""
    return [
        f"warning: {rel} in the app's directory is a database: every release gets its own "
        f"copy of it, and each deploy replaces the running release's copy with this one — "
        f"whatever the app wrote to it is lost (fix: {database_fix(rel)})"
        for rel in databases
    ]
