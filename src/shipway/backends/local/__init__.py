"""The local backend: this machine's own processes, supervised, behind an HTTP router.

:func:`shipway.backends.open_backend` calls ``backend.connect``; see docs/local.md.
"""

from __future__ import annotations

from shipway.backends.local.backend import LocalBackend, connect

__all__ = ["LocalBackend", "connect"]
