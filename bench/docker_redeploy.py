"""Benchmark of the Docker hosts backend on the test hosts of scripts/docker-testenv
(A: local socket, B: over SSH).

Measures:
  1. failed requests during N redeploys (v1 <-> v2, both hosts) under a loopback request
     loop against both hosts' proxies (bounded in count and time; goal 0);
  2. deploy time: the median shipway redeploy (lock, records, observe, health gate, switch,
     drain, removal of the old containers) against starting the same containers with the
     Docker SDK directly (create + start on both hosts, wait until they answer HTTP) — the
     overhead ratio. The drain window (``drain_timeout``, 1 s here) is part of shipway's
     time and is reported separately.

Run (root, test hosts up):  .venv/bin/python bench/docker_redeploy.py [--redeploys 20]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.testenv.docker import DockerEnv, ensure_docker_env  # noqa: E402

from shipway import api  # noqa: E402

DRAIN = 1.0


class Quiet:
    def line(self, text: str) -> None:
        pass

    def progress(self, process: str, counts: Any, note: str = "") -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def spec(env: DockerEnv, name: str, port: int) -> str:
    return f"""
[app]
name = "{name}"
image = "{env.images.v1}"

[processes.web]
port = 8080
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 100

[slots.bench]
backend = "docker"
hosts = ["{env.a.url}", "{env.b.url}"]
proxy_image = "{env.images.proxy}"
proxy_port = {port}
drain_timeout = "{DRAIN}s"
"""


class Load:
    def __init__(self, urls: list[str], per_url: int, limit: float) -> None:
        self.ok: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.stop = threading.Event()
        self.deadline = time.monotonic() + limit
        self.threads = [
            threading.Thread(target=self.loop, args=(u,), daemon=True)
            for u in urls
            for _ in range(per_url)
        ]

    def loop(self, url: str) -> None:
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    self.ok[resp.read().decode().strip()] += 1
            except (urllib.error.URLError, OSError) as exc:
                self.failed[f"{type(exc).__name__}: {exc}"[:120]] += 1
            time.sleep(0.005)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)


def direct_start(env: DockerEnv, name: str, image: str) -> float:
    """The same work without shipway: create + start one container per host with the SDK
    (B over SSH), wait until each answers GET /up, then remove them."""
    clients = [env.client(env.a), env.client(env.b)]
    started = time.monotonic()
    containers = []
    try:
        for client in clients:
            c = client.containers.create(
                image, name=f"{name}-direct-{uuid.uuid4().hex[:6]}", environment=["PORT=8080"]
            )
            c.start()
            containers.append((client, c))
        for _, c in containers:
            deadline = time.monotonic() + 60
            while True:
                c.reload()
                ip = next(iter(c.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
                r = c.exec_run(["wget", "-q", "-O", "-", f"http://{ip}:8080/up"])
                if r.exit_code == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        return time.monotonic() - started
    finally:
        for _, c in containers:
            c.remove(force=True)
        for client in clients:
            client.close()


def cleanup(env: DockerEnv, name: str) -> None:
    """Remove everything the benchmark's app left on both hosts (records included)."""
    label = {"label": [f"org.shipway.app={name}"]}
    for host in (env.a, env.b):
        client = env.local_client(host)
        try:
            for c in client.containers.list(all=True, filters=label):
                c.remove(force=True)
            for v in client.volumes.list(filters=label):
                v.remove(force=True)
            for n in client.networks.list(filters=label):
                n.remove()
        finally:
            client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--redeploys", type=int, default=20)
    ap.add_argument("--clients", type=int, default=2, help="client threads per host")
    args = ap.parse_args()

    env = ensure_docker_env()
    os.environ["SHIPWAY_SSH_CONFIG"] = str(env.ssh_home / ".ssh" / "config")
    os.environ["SHIPWAY_KNOWN_HOSTS"] = str(env.known_hosts)
    name = f"bench{uuid.uuid4().hex[:6]}"
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="shipway-docker-bench-"))
    (work / "shipway.toml").write_text(spec(env, name, port))
    app = api.load(work / "shipway.toml")
    urls = [f"http://{h.address}:{port}/version" for h in (env.a, env.b)]
    times: list[float] = []
    try:
        t0 = time.monotonic()
        first = api.deploy(app, "bench", reporter=Quiet())
        cold = time.monotonic() - t0
        assert first.ok, first.line()
        with Load(urls, args.clients, limit=60 + 60 * args.redeploys) as load:
            for i in range(args.redeploys):
                image = env.images.v2 if i % 2 == 0 else env.images.v1
                t0 = time.monotonic()
                outcome = api.deploy(app, "bench", image=image, reporter=Quiet())
                times.append(time.monotonic() - t0)
                assert outcome.ok, outcome.line()
                print(f"redeploy {i + 1}/{args.redeploys}: {times[-1]:.2f}s", file=sys.stderr)
        direct = [direct_start(env, name, env.images.v2) for _ in range(5)]
    finally:
        cleanup(env, name)
    median = statistics.median(times)
    base = statistics.median(direct)
    result = {
        "redeploys": args.redeploys,
        "requests_ok": sum(load.ok.values()),
        "requests_failed": sum(load.failed.values()),
        "failures": dict(load.failed.most_common(5)),
        "cold_first_deploy_s": round(cold, 2),
        "redeploy_median_s": round(median, 2),
        "redeploy_min_max_s": [round(min(times), 2), round(max(times), 2)],
        "drain_s": DRAIN,
        "direct_sdk_start_median_s": round(base, 2),
        "overhead_ratio": round(median / base, 2),
        "overhead_ratio_without_drain": round((median - DRAIN) / base, 2),
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))
    return 0 if result["requests_failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
