"""This process's CPU for one Engine API call of shipway's Docker client, against the same
client that reads the environment's proxies and ``~/.netrc`` on every call (requests'
default, which shipway's client of a Unix socket or SSH turns off: neither applies).

Each round makes ``--calls`` calls of each kind (``GET /_ping``; ``GET /containers/json``
filtered to none) on each client, the two clients interleaved, on the local sockets of
scripts/docker-testenv's hosts A and B (over SSH a call costs more; the look-ups it skips
are the same). It prints the median CPU milliseconds per call of each and their ratio. The
environment is this process's (the test environment's 60-odd variables, as the test
workers have it).

Run (root, test hosts up):  .venv/bin/python bench/docker_client_cpu.py [--rounds 9]
    [--calls 100] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchlib import Run, median  # noqa: E402
from tests.testenv.docker import ensure_docker_env  # noqa: E402

from shipway.backends.docker.retrying import RetryingAPIClient  # noqa: E402
from shipway.backends.retry import RetryPolicy  # noqa: E402

Call = Callable[[RetryingAPIClient], Any]


def per_call_ms(call: Call, client: RetryingAPIClient, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        call(client)
    return (time.process_time() - start) * 1000 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    env = ensure_docker_env()
    run = Run("docker_client_cpu", vars(args) | {"json": str(args.json)})
    figures: dict[str, Any] = {}
    for label, host in {"host a": env.a, "host b": env.b}.items():
        clients = {}
        for trust in (True, False):
            client = RetryingAPIClient(base_url=host.socket, version="1.41", policy=RetryPolicy())
            client.trust_env = trust
            clients[trust] = client
        kinds: dict[str, Call] = {
            "ping": lambda c: c.ping(),
            "containers": lambda c: c.containers(filters={"name": "no-such-container"}),
        }
        for kind, call in kinds.items():
            samples: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.rounds):
                for trust, client in clients.items():
                    samples[trust].append(per_call_ms(call, client, args.calls))
            trusting, distrusting = median(samples[True]), median(samples[False])
            figures[f"{label} {kind}"] = {
                "trusting_env_cpu_ms": round(trusting, 3),
                "shipway_cpu_ms": round(distrusting, 3),
                "cpu_ratio": round(distrusting / trusting, 3),
            }
            print(
                f"{label} {kind:10}  reading the environment {trusting:6.3f} ms"
                f"  shipway's {distrusting:6.3f} ms  ratio {distrusting / trusting:.2f}",
                flush=True,
            )
    run.finish(figures, args.json)


if __name__ == "__main__":
    main()
