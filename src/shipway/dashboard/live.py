"""The operations running now, from the one event stream: the files every command writes
on this machine (events/live.py), read as they grow, for ``/api/live``.

A :class:`LiveTail` is one reader's place in those files (one page's stream): on its first
read, every operation still running and, per slot, the last one that ended within
:data:`RECENT` seconds, from their first event; after that, what each file gained since —
a new operation's file from its start. Each message names its operation (``op``, the
file's name), its app, slot and process, and carries one event as the command wrote it;
an operation whose process died without its ``ended`` is told once, ``gone``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from shipway.events.live import OpFile, live_dir, op_files

#: how long an ended operation is still shown to a page that opens (seconds)
RECENT = 300.0
#: the most one read takes from a file (a page opening on a long canary reads it in parts)
CHUNK = 1 << 20


def live_dirs(state_dirs: Iterable[Path]) -> list[Path]:
    """Where to read: this machine's state directory's, and each given one's."""
    return list(dict.fromkeys([live_dir(), *(live_dir(Path(d).resolve()) for d in state_dirs)]))


class LiveTail:
    """One reader's place in the operations' files of ``dirs`` (only those of ``app`` and
    ``slot`` when given)."""

    def __init__(
        self,
        dirs: Sequence[Path],
        app: str | None = None,
        slot: str | None = None,
        recent: float = RECENT,
    ) -> None:
        self.dirs, self.app, self.slot, self.recent = dirs, app, slot, recent
        #: file → (where the next read starts, the part of a line read so far)
        self._at: dict[Path, tuple[int, bytes]] = {}
        #: files read to their end: ended, gone, or left out on the first read
        self._done: set[Path] = set()
        self._first = True

    def read(self) -> list[dict[str, Any]]:
        """The messages since the last read (on the first: the operations to show)."""
        files = [f for d in self.dirs for f in op_files(d) if self._wanted(f)]
        if self._first:
            self._first = False
            shown = self._shown(files)
            self._done.update(f.path for f in files if f.path not in shown)
        present = {f.path for f in files}
        self._done &= present  # a pruned file is forgotten
        self._at = {p: v for p, v in self._at.items() if p in present}
        out: list[dict[str, Any]] = []
        for f in files:
            if f.path not in self._done:
                out.extend(self._read(f))
        return out

    def _wanted(self, f: OpFile) -> bool:
        return self.app is None or (f.app == self.app and f.slot == self.slot)

    def _shown(self, files: list[OpFile]) -> set[Path]:
        """Every running operation, and each slot's newest one when it ended recently."""
        now = time.time()
        shown: set[Path] = set()
        newest: dict[tuple[str, str], OpFile] = {}
        for f in files:  # oldest first: the last one kept per slot is its newest
            if not f.over():
                shown.add(f.path)
            else:
                newest[(f.app, f.slot)] = f
        for f in newest.values():
            try:
                if now - f.path.stat().st_mtime <= self.recent:
                    shown.add(f.path)
            except OSError:
                continue
        return shown

    def _read(self, f: OpFile) -> list[dict[str, Any]]:
        start, partial = self._at.get(f.path, (0, b""))
        alive = f.writer_alive()  # asked before reading: a last line written as it ends is read
        try:
            with open(f.path, "rb") as fh:
                fh.seek(start)
                data = fh.read(CHUNK)
        except OSError:
            return []
        lines = (partial + data).split(b"\n")
        self._at[f.path] = (start + len(data), lines.pop())  # an unfinished line waits
        about = {"op": f.op, "app": f.app, "slot": f.slot, "pid": f.pid}
        out: list[dict[str, Any]] = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            out.append({**about, "event": event})
            if event.get("event") == "ended":
                self._done.add(f.path)
        if f.path not in self._done and not alive and len(data) < CHUNK:
            out.append({**about, "gone": True})
            self._done.add(f.path)
        return out


def sse(doc: Any, kind: str = "") -> bytes:
    """One server-sent event: its kind (none: ``message``) and one line of JSON."""
    head = f"event: {kind}\n" if kind else ""
    return f"{head}data: {json.dumps(doc, separators=(',', ':'), default=str)}\n\n".encode()
