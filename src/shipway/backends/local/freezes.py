"""A local slot's freeze: ``freeze.json`` in the slot's state directory (backends/freezes.py)."""

from __future__ import annotations

import contextlib

from shipway.backends.freezes import decode_freeze, encode_freeze
from shipway.backends.local.dirs import private_dir, write_atomic
from shipway.backends.local.state import LocalState
from shipway.guard import Clearance
from shipway.spec.freeze import Freeze
from shipway.spec.model import Target

FILE = "freeze.json"


class LocalFreezes(LocalState):
    def read_freeze(self, target: Target) -> Freeze | None:
        path = self.dirs(target).base / FILE
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        return decode_freeze(text, str(path))

    def write_freeze(self, clearance: Clearance, target: Target, freeze: Freeze | None) -> None:
        d = self._guarded(clearance, target)
        path = d.base / FILE
        if freeze is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        private_dir(d.base)
        write_atomic(path, encode_freeze(freeze).encode(), 0o600)
