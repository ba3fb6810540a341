"""Saying when data would be lost: files the running release wrote inside its own copy of
the app (its snapshot, its container) at run time are not in the next release — a SQLite
database beside the code, uploads in ``media/``. A deploy reads them from the backend before
it replaces anything and, once it rolled, warns naming them and the fix (a volume).

What must never happen: the warning turning a success into a failure, or a read error
hiding that the question could not be answered (it is said instead).
"""

from __future__ import annotations

import threading

from shipway.backends.protocol import Backend
from shipway.errors import BackendError
from shipway.release.model import Release
from shipway.spec.model import Target

SHOWN = 10


class WrittenInside:
    """What ``anchor`` wrote inside itself, read by the backend in a thread of its own from
    the moment this is made: beside the observation and the plan (on Docker a diff of every
    container of the anchor, on every host), so no step waits for it. :meth:`warning`
    waits for the answer; it is asked before the first step replaces anything."""

    def __init__(self, backend: Backend, target: Target, anchor: Release | None) -> None:
        self.anchor = anchor
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
        found = self._found
        if not found:
            return None
        shown = ", ".join(found[:SHOWN])
        if len(found) > SHOWN:
            shown += f" and {len(found) - SHOWN} more"
        top = found[0].split("/", 1)[0]
        return (
            f"r{anchor.revision} wrote {len(found)} file(s) at run time inside its own copy of "
            f"the app, which r{release.revision} does not have: {shown} — whatever they hold "
            f"is lost to r{release.revision} (fix: declare a volume for that data, e.g. "
            f'[volumes.data] path = "{top}", so it outlives every release)'
        )
