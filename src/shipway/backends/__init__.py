"""Backends: I/O only, one package each, one shared protocol (:mod:`.protocol`).

Backends are imported when a slot needs one, so ``shipway --help`` never pays for
kubernetes or docker client libraries.
"""

from __future__ import annotations

import importlib

from shipway.backends.protocol import Backend
from shipway.errors import InputError
from shipway.spec.model import App, Slot

_MODULES = {
    "local": "shipway.backends.local",
    "docker": "shipway.backends.docker",
    "kubernetes": "shipway.backends.kubernetes",
}


def open_backend(app: App, slot: Slot) -> Backend:
    """The backend for a slot, connected to its address (kube context, docker hosts …)."""
    module_name = _MODULES[slot.backend]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(module_name):
            raise InputError(
                f"slot {slot.name!r}: the {slot.backend} backend is not available in this "
                "version of shipway"
            ) from exc
        raise
    backend: Backend = module.connect(app, slot)
    return backend
