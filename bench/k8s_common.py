"""Shared by the Kubernetes benchmarks: the test control plane, namespaces, a spec, timed
reporters, a pod watcher that notes the first doomed signal, the audit log.

Run the benchmarks with the project's venv, with the test control plane up:

    scripts/k8s-testenv up && eval "$(scripts/k8s-testenv env)"
    .venv/bin/python bench/k8s_failfast.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightkube import Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount

REPO = Path(__file__).resolve().parents[1]
CHARTS = REPO / "tests" / "charts"


def kubeconfig() -> Path:
    path = os.environ.get("SHIPWAY_TEST_KUBECONFIG")
    if not path:
        sys.exit('set SHIPWAY_TEST_KUBECONFIG: eval "$(scripts/k8s-testenv env)"')
    os.environ["KUBECONFIG"] = path
    return Path(path)


def admin() -> Client:
    return Client(KubeConfig.from_file(kubeconfig()), field_manager="shipway-bench")


#: the label that puts a namespace's pods on the test plane's real node (scripts/k8s-testenv)
REAL_NODE = {"shipway.io/real-node": "true"}


@contextmanager
def namespace(client: Client, prefix: str, real: bool = False) -> Iterator[str]:
    """A fresh namespace (``real``: its pods run on the real node), deleted afterwards."""
    name = f"bench-{prefix}-{uuid.uuid4().hex[:6]}"
    labels = REAL_NODE if real else None
    client.create(Namespace(metadata=ObjectMeta(name=name, labels=labels)))
    # pods need the default ServiceAccount, made by the controller manager
    for _, sa in client.watch(ServiceAccount, namespace=name, server_timeout=30):
        if sa.metadata.name == "default":
            break
    try:
        yield name
    finally:
        client.delete(Namespace, name)


def registry_image(tag: str) -> str:
    """An image of the Docker test registry (scripts/docker-testenv), which the real node
    pulls: ``web:v1`` serves, ``web:crash`` exits 3 at once."""
    prefix = os.environ.get("SHIPWAY_TEST_IMAGE_PREFIX")
    if not prefix:
        sys.exit('set SHIPWAY_TEST_IMAGE_PREFIX: eval "$(scripts/docker-testenv env)"')
    return f"{prefix}/web:{tag}"


def write_spec(
    directory: Path, ns: str, processes: int = 1, replicas: int = 2, real: bool = False
) -> Path:
    """The bench app; ``real``: the test image's own server (port 8080, ``/up`` probed)
    instead of a command kwok never runs."""
    image = registry_image("v1") if real else "registry.example/bench:1"
    lines = ["[app]", 'name = "bench"', f'image = "{image}"', 'image_type = "dockerfile"', ""]
    names = ["web"] if processes == 1 else [f"p{i}" for i in range(processes)]
    for i, name in enumerate(names):
        lines += [f"[processes.{name}]"]
        if real:
            lines += ["port = 8080", 'healthcheck = { path = "/up", interval = "1s" }']
        else:
            lines += [f'command = "serve {i}"', f"port = {8000 + i}"]
        lines += [f"replicas = {replicas}", ""]
    lines += ["[env]", 'MESSAGE = "hello"', ""]
    lines += ["[slots.bench]", 'backend = "kubernetes"', f'namespace = "{ns}"', ""]
    spec = directory / "shipway.toml"
    spec.write_text("\n".join(lines))
    return spec


def tempdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="shipway-bench-"))


class TimedLines:
    """A reporter that timestamps every line (time.monotonic())."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []

    def line(self, text: str) -> None:
        self.lines.append((time.monotonic(), text))

    def progress(self, process: str, counts: Mapping[str, int], note: str = "") -> None:
        pass

    def first(self, needle: str) -> float | None:
        return next((t for t, text in self.lines if needle in text), None)


class DoomWatch:
    """Watches the pods of a namespace and notes when the first pod running ``tag`` shows
    a doomed signal (an exited container, or a waiting reason like CrashLoopBackOff)."""

    def __init__(self, client: Client, ns: str, tag: str) -> None:
        self.client, self.ns, self.tag = client, ns, tag
        self.first: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.first is None:
            for _, pod in self.client.watch(Pod, namespace=self.ns, server_timeout=5):
                if self._doomed(pod):
                    self.first = time.monotonic()
                    return
                if self._stop.is_set():
                    return

    def _doomed(self, pod: Any) -> bool:
        spec = pod.spec
        tagged = (c.image.split("@")[0] for c in spec.containers) if spec else ()
        if not any(image.endswith(":" + self.tag) for image in tagged):  # pinned or not
            return False
        for cs in (pod.status.containerStatuses or []) if pod.status else []:
            state = cs.state
            if state and (
                state.terminated
                or (state.waiting and state.waiting.reason not in (None, "ContainerCreating"))
            ):
                return True
        return False

    def stop(self) -> None:
        self._stop.set()


class AuditLog:
    """API requests seen by the audit log from an offset on (one line per request)."""

    def __init__(self) -> None:
        path = os.environ.get("SHIPWAY_TEST_AUDIT_LOG")
        if not path:
            sys.exit('set SHIPWAY_TEST_AUDIT_LOG: eval "$(scripts/k8s-testenv env)"')
        self.path = Path(path)
        self.offset = self.path.stat().st_size

    def mark(self) -> None:
        self.offset = self.path.stat().st_size

    def requests(self, ns: str, user: str = "shipway-test-admin") -> list[dict[str, Any]]:
        """Requests by ``user`` about namespace ``ns`` (or the Namespace object itself),
        one per audit ID, written since the last mark."""
        seen: dict[str, dict[str, Any]] = {}
        with self.path.open("rb") as f:
            f.seek(self.offset)
            for raw in f:
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                if event.get("user", {}).get("username") != user:
                    continue
                ref = event.get("objectRef") or {}
                mine = ref.get("namespace") == ns or (
                    ref.get("resource") == "namespaces" and ref.get("name") == ns
                )
                if mine:
                    seen[event["auditID"]] = event
        return list(seen.values())


def by_verb(events: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for e in events:
        key = f"{e['verb']} {e.get('objectRef', {}).get('resource', '?')}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
