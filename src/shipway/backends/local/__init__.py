"""The local backend: this machine's own processes, supervised, behind an HTTP router.

``connect`` is what :func:`shipway.backends.open_backend` calls. It does no I/O: the state
directory, supervisord and the router are created or started only by the first mutating
step, so ``plan`` and ``status`` never start anything. See docs/local.md.
"""

from __future__ import annotations

from shipway.backends.local.backend import LocalBackend
from shipway.spec.model import App, Slot


def connect(app: App, slot: Slot) -> LocalBackend:
    return LocalBackend(app, slot)


__all__ = ["LocalBackend", "connect"]
