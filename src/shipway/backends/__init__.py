"""Backends: I/O only, one package each, one shared protocol (:mod:`.protocol`).

:func:`open_backend` is where a slot's backend is chosen: one ``match`` on the slot's
``backend`` name, each case importing its own package and calling its ``connect``. The
import stays inside the case, so ``shipway --help`` never pays for the kubernetes or docker
client libraries, and a reader (or mypy) follows the call straight into the backend class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shipway.errors import InputError

if TYPE_CHECKING:
    from shipway.backends.protocol import Backend
    from shipway.spec.model import App, Slot


def open_backend(app: App, slot: Slot) -> Backend:
    """The backend for a slot, connected to its address (kube context, docker hosts …).

    No case does I/O: each backend connects on its first read or step."""
    match slot.backend:
        case "local":
            from shipway.backends.local.backend import connect as connect_local

            return connect_local(app, slot)
        case "docker":
            from shipway.backends.docker.backend import connect as connect_docker

            return connect_docker(app, slot)
        case "kubernetes":
            from shipway.backends.kubernetes.backend import connect as connect_kubernetes

            return connect_kubernetes(app, slot)
    raise InputError(
        f"slot {slot.name!r}: unknown backend {slot.backend!r} "
        '(hint: backend = "local", "docker" or "kubernetes")'
    )
