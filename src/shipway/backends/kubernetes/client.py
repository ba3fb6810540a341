"""Connecting to a cluster: a kubeconfig context, ``KUBECONFIG``, or in-cluster config.

Order: in-cluster service account (when running in a pod and no context is named), else
the file named by ``KUBECONFIG`` (first path of a list), else ``~/.kube/config``; the slot's
``context`` selects a context, otherwise the current one. Errors become InputError with
the fix, at this edge.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from shipway.errors import InputError

if TYPE_CHECKING:
    from lightkube import Client
    from lightkube.config.kubeconfig import SingleConfig

FIELD_MANAGER = "shipway"


def kubeconfig_path() -> Path:
    raw = os.environ.get("KUBECONFIG", "")
    first = next((p for p in raw.split(os.pathsep) if p), "")
    return Path(first).expanduser() if first else Path("~/.kube/config").expanduser()


def load_config(context: str | None) -> SingleConfig:
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.core.exceptions import ConfigError

    if context is None:
        try:
            in_cluster = KubeConfig.from_service_account().get()
        except ConfigError:
            in_cluster = None
        if in_cluster is not None:
            return in_cluster
    path = kubeconfig_path()
    try:
        config = KubeConfig.from_file(path)
    except (ConfigError, OSError) as exc:
        raise InputError(
            f"cannot read the kubeconfig {path}: {exc} (hint: set KUBECONFIG, or run inside "
            "a cluster)"
        ) from exc
    try:
        single = config.get(context_name=context)
    except ConfigError as exc:
        known = ", ".join(sorted(config.contexts)) or "(none)"
        raise InputError(
            f"kubeconfig {path}: {exc} (contexts: {known}; hint: set the slot's context)"
        ) from exc
    if single is None:  # pragma: no cover - lightkube raises instead
        raise InputError(f"kubeconfig {path} has no usable context")
    return single


def make_client(context: str | None, namespace: str | None = None) -> Client:
    """A lightkube client applying as field manager ``shipway``."""
    from lightkube import Client

    return Client(config=load_config(context), namespace=namespace, field_manager=FIELD_MANAGER)
