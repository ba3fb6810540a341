"""When the reader of shipway's standard output goes away (``shipway history | head``).

A read (history, status, logs …) has nothing left to do for a reader that is gone: it ends
at once, quietly, with exit code 0 — the reader took what it wanted. An operation (deploy,
rollback, restart …) is never cut off half-way because nobody reads its progress: it
carries on to its outcome with its further output discarded, says so once on standard
error, and exits with the outcome's code. Either way no traceback, no "unexpected error",
no complaint from the interpreter's own exit.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO

#: the exit code of a read whose reader went away
READER_GONE = 0


class GuardedStdout:
    """Standard output that notices its reader going away (a BrokenPipeError): from then
    on, all it is given is discarded (the descriptor points at /dev/null, so the
    interpreter's final flush is quiet too). ``carry_on`` (an operation): the error is
    swallowed and said once; otherwise it is raised again, for the command to end."""

    def __init__(self, stream: TextIO, name: str = "standard output") -> None:
        self._stream = stream
        self.name = name
        self.gone = False
        self.carry_on = ""  #: what carries on (e.g. "the deploy"); "" for a read

    def _reader_gone(self) -> None:
        first = not self.gone
        self.gone = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        if self.carry_on and first:
            with contextlib.suppress(OSError, ValueError):  # stderr may be that pipe too
                sys.stderr.write(
                    f"note: {self.name} was closed by its reader; {self.carry_on} carries "
                    "on to its outcome, its further output discarded\n"
                )
                sys.stderr.flush()
        if not self.carry_on:
            raise BrokenPipeError(32, "the reader of standard output went away")

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()
                return
        else:
            with contextlib.suppress(OSError):
                self._stream.flush()  # to /dev/null now

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def install() -> None:
    """Guard ``sys.stdout`` and ``sys.stderr`` (once): progress goes to stderr with
    ``-o json``, and ``2>&1 | head`` closes both."""
    if not isinstance(sys.stdout, GuardedStdout):
        sys.stdout = GuardedStdout(sys.stdout)
    if not isinstance(sys.stderr, GuardedStdout):
        sys.stderr = GuardedStdout(sys.stderr, "standard error")


def carry_on(what: str) -> None:
    """From now on, a closed standard output does not end the command: ``what`` (e.g.
    "the deploy") carries on."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, GuardedStdout):
            stream.carry_on = what
