"""Helpers for the Kubernetes backend's tests against the real test control plane.

Every test gets its own namespace (``k8s_namespace``); the spec's slot points at it. The
API-level helpers build a backend with short failure windows where a test needs one; the
CLI helper runs ``python -m shipway`` in a subprocess, where exit codes matter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.apps_v1 import Deployment, ReplicaSet
from lightkube.resources.core_v1 import Namespace, Node, Secret

from shipway import api
from shipway.backends.kubernetes.backend import KubernetesBackend
from shipway.backends.kubernetes.rollout import Tuning
from shipway.engine.outcome import Outcome
from shipway.release.model import Release
from shipway.spec import App, load
from tests import cliproc

TOKEN = "tok-5f3a9c1e-never-print-me"
BASE_ENV = {"SHOP_TOKEN": TOKEN}

SHOP = """
[app]
name = "shop"
image = "registry.example/shop:1"
image_type = "dockerfile"

[processes.web]
command = "serve"
port = 8000
replicas = 2

[processes.worker]
command = "work"

[env]
LOG_LEVEL = "info"

[secrets]
TOKEN = {{ from_env = "SHOP_TOKEN" }}

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"
{slot_extra}
"""


class Lines:
    """A reporter that keeps what it is told."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.progress_seen: list[tuple[str, dict[str, int], str]] = []

    def line(self, text: str) -> None:
        self.lines.append(text)

    def progress(self, process: str, counts: Any, note: str = "") -> None:
        self.progress_seen.append((process, dict(counts), note))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass
class Slot:
    """One test's slot: its spec file, namespace, and ways to act on it."""

    directory: Path
    namespace: str
    kubeconfig: Path
    client: Client
    backends: list[KubernetesBackend] = field(default_factory=list)
    real_node: str | None = None  # set by the real_slot fixture

    @property
    def spec_file(self) -> Path:
        return self.directory / "shipway.toml"

    def write(self, text: str = SHOP, **values: str) -> App:
        values.setdefault("namespace", self.namespace)
        values.setdefault("slot_extra", "")
        self.spec_file.write_text(textwrap.dedent(text).format(**values))
        return self.app()

    def edit(self, old: str, new: str) -> App:
        """Replace text in the spec file (it must be there) and load it again."""
        text = self.spec_file.read_text()
        assert old in text, f"{old!r} is not in the spec"
        self.spec_file.write_text(text.replace(old, new))
        return self.app()

    def append(self, extra: str) -> App:
        self.spec_file.write_text(self.spec_file.read_text() + extra)
        return self.app()

    def app(self) -> App:
        return load(self.spec_file)

    def backend(self, app: App, slot: str = "test1", **tuning: Any) -> KubernetesBackend:
        backend = KubernetesBackend(app, app.slots.get(slot), tuning=Tuning(**tuning))
        self.backends.append(backend)
        return backend

    def deploy(
        self, app: App, image: str | None = None, slot: str = "test1", **kw: Any
    ) -> tuple[Outcome, Lines]:
        lines = Lines()
        tuning = kw.pop("tuning", {})
        outcome = api.deploy(
            app,
            slot,
            image=image,
            backend=self.backend(app, slot, **tuning),
            reporter=lines,
            **kw,
        )
        return outcome, lines

    def records(self, app: App, slot: str = "test1") -> dict[int, Release]:
        return {r.revision: r for r in api.history(app, slot, backend=self.backend(app, slot))}

    def statuses(self, app: App, slot: str = "test1") -> dict[int, str]:
        return {n: str(r.status) for n, r in self.records(app, slot).items()}

    def deployment(self, name: str) -> Any:
        return self.client.get(Deployment, name, namespace=self.namespace)

    def images(self) -> dict[str, str]:
        """Deployment name → its first container's image."""
        return {
            d.metadata.name: d.spec.template.spec.containers[0].image
            for d in self.client.list(Deployment, namespace=self.namespace)
        }

    def replicasets(self, deployment: str) -> dict[str, Any]:
        return {
            rs.metadata.name: rs
            for rs in self.client.list(ReplicaSet, namespace=self.namespace)
            if any(o.name == deployment for o in rs.metadata.ownerReferences or [])
        }

    def secret(self, name: str) -> Any:
        return self.client.get(Secret, name, namespace=self.namespace)

    def cli(self, *args: str, env: dict[str, str] | None = None, timeout: float = 240) -> Any:
        """Run ``shipway -f SPEC ARGS`` in a subprocess (exit codes, real output)."""
        full_env = {
            **os.environ,
            **BASE_ENV,
            "KUBECONFIG": str(self.kubeconfig),
            **(env or {}),
        }
        return cliproc.run(
            [sys.executable, "-m", "shipway", "-f", str(self.spec_file), *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            check=False,
        )

    def start_deploy(self, image: str) -> subprocess.Popen[str]:
        """``shipway deploy test1 --image IMAGE`` started in a subprocess (to interrupt it),
        its output in one stream."""
        args = ["-f", str(self.spec_file), "deploy", "test1", "--image", image]
        return cliproc.ShipwayProcess(
            [sys.executable, "-m", "shipway", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **BASE_ENV, "KUBECONFIG": str(self.kubeconfig)},
        )

    def expire_lease(self, app: str, slot: str = "test1") -> None:
        """The slot's Lease as if its holder had stopped renewing it 5 minutes ago."""
        from datetime import UTC, datetime, timedelta

        from lightkube.resources.coordination_v1 import Lease

        from shipway.backends.kubernetes.lease import lease_name

        held = self.client.get(Lease, lease_name(app, slot), namespace=self.namespace)
        held.spec.renewTime = datetime.now(UTC) - timedelta(seconds=300)
        self.client.replace(held)

    def close(self) -> None:
        for backend in self.backends:
            backend.close()


@pytest.fixture
def kube_env(k8s_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """KUBECONFIG and the app's secret in this process's environment."""
    monkeypatch.setenv("KUBECONFIG", str(k8s_kubeconfig))
    for key, value in BASE_ENV.items():
        monkeypatch.setenv(key, value)
    return k8s_kubeconfig


@pytest.fixture
def slot(kube_env: Path, k8s_client: Client, k8s_namespace: str, tmp_path: Path) -> Iterator[Slot]:
    s = Slot(tmp_path, k8s_namespace, kube_env, k8s_client)
    yield s
    s.close()


REAL_NODE_LABEL = ("shipway.io/real-node", "true")  # scripts/k8s-testenv's real node


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_node: runs real containers on the test plane's real node (kubelet)"
    )


@pytest.fixture(scope="session")
def real_node(k8s_client: Client) -> str:
    """The name of the test plane's real node (kubelet + containerd), Ready."""
    key, value = REAL_NODE_LABEL
    if os.environ.get("SHIPWAY_K8S_REAL_NODE") == "0":
        pytest.skip("SHIPWAY_K8S_REAL_NODE=0: the test plane runs without its real node")
    for node in k8s_client.list(Node, labels={key: value}):
        conditions = node.status.conditions if node.status else None
        if any(c.type == "Ready" and c.status == "True" for c in conditions or []):
            return str(node.metadata.name if node.metadata else "")
    pytest.fail(f"no Ready node labelled {key}={value}: run scripts/k8s-testenv up")


@pytest.fixture
def real_slot(slot: Slot, real_node: str) -> Slot:
    """A slot whose pods run real containers: its namespace carries the label that makes the
    test plane's admission policy add the real node's nodeSelector and toleration."""
    key, value = REAL_NODE_LABEL
    slot.client.patch(Namespace, slot.namespace, {"metadata": {"labels": {key: value}}})
    slot.real_node = real_node
    return slot


MakeSlot = Callable[[], Slot]
