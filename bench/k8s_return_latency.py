"""From "the Deployment is Available" to shipway returning.

Each run rolls a 2-replica Deployment to a new image. A watcher of its own (not
shipway's) notes the moment the Deployment meets kubectl's "done" rule for the new
generation (observedGeneration >= generation, updated == replicas == available ==
spec.replicas); the time shipway returns after that is what it spends recording the
release, releasing its lock and stopping its watches. Measured in-process through the
Python API, and for the command line as a subprocess (interpreter exit included).

    .venv/bin/python bench/k8s_return_latency.py [--runs 10]

Goal: <= 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from k8s_common import admin, kubeconfig, namespace, tempdir, write_spec
from lightkube.resources.apps_v1 import Deployment

from shipway import api
from shipway.spec import load


class AvailableWatch:
    """Notes when Deployment ``name`` is done at a generation above ``after``."""

    def __init__(self, client: Any, ns: str, name: str, after: int) -> None:
        self.at: float | None = None
        self._thread = threading.Thread(
            target=self._run, args=(client, ns, name, after), daemon=True
        )
        self._thread.start()

    def _run(self, client: Any, ns: str, name: str, after: int) -> None:
        for _, dep in client.watch(
            Deployment, namespace=ns, fields={"metadata.name": name}, server_timeout=120
        ):
            gen, st = dep.metadata.generation, dep.status
            if gen <= after or st is None or (st.observedGeneration or 0) < gen:
                continue
            want = dep.spec.replicas
            if (
                (st.updatedReplicas or 0)
                == (st.replicas or 0)
                == (st.availableReplicas or 0)
                == want
            ):
                self.at = time.monotonic()
                return

    def join(self) -> None:
        self._thread.join(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    kubeconfig()
    client = admin()
    with namespace(client, "latency") as ns:
        spec = write_spec(tempdir(), ns)
        app = load(spec)
        assert api.deploy(app, "bench").ok
        in_process: list[float] = []
        cli: list[float] = []
        for i in range(args.runs):
            gen = client.get(Deployment, "bench-web", namespace=ns).metadata.generation
            watch = AvailableWatch(client, ns, "bench-web", gen)
            outcome = api.deploy(app, "bench", image=f"registry.example/bench:{i + 2}")
            returned = time.monotonic()
            watch.join()
            assert outcome.ok and watch.at is not None, outcome.line()
            in_process.append(returned - watch.at)

            gen = client.get(Deployment, "bench-web", namespace=ns).metadata.generation
            watch = AvailableWatch(client, ns, "bench-web", gen)
            subprocess.run(
                [sys.executable, "-m", "shipway", "-f", str(spec), "deploy", "bench",
                 "--image", f"registry.example/bench:cli{i}"],
                check=True, capture_output=True, env=os.environ,
            )  # fmt: skip
            returned = time.monotonic()
            watch.join()
            assert watch.at is not None
            cli.append(returned - watch.at)
            ms = (in_process[-1] * 1000, cli[-1] * 1000)
            print(f"run {i + 1}: api {ms[0]:6.0f} ms   cli {ms[1]:6.0f} ms")
    for label, values in (("api (in-process)", in_process), ("cli (subprocess)", cli)):
        print(
            f"{label}: median {statistics.median(values) * 1000:.0f} ms, "
            f"max {max(values) * 1000:.0f} ms"
        )
    worst = max(in_process + cli)
    print(f"goal <= 0.5 s: {'met' if worst <= 0.5 else 'NOT met'} (worst {worst:.2f}s)")


if __name__ == "__main__":
    main()
