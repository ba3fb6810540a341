"""Deployment ids: what makes a process's workload roll.

A deploy gives every process a fresh id. A targeted restart gives a fresh id to the
target only; every other process keeps the id recorded in the deployed release, so its
workload stays byte-identical and the engine leaves it alone.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping


def new_deployment_id() -> str:
    """Sortable and unique: UTC time to the second plus a random suffix."""
    return time.strftime("%Y%m%d%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def fresh_ids(processes: Iterable[str]) -> dict[str, str]:
    one = new_deployment_id()
    return {name: one for name in processes}


def restart_ids(
    recorded: Mapping[str, str], processes: Iterable[str], targets: Iterable[str]
) -> dict[str, str]:
    """Fresh ids for ``targets``; the recorded id for every other process.

    A process with no recorded id (declared after the release was made) gets a fresh one.
    """
    fresh = new_deployment_id()
    wanted = set(targets)
    return {
        name: fresh if name in wanted or name not in recorded else recorded[name]
        for name in processes
    }
