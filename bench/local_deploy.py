"""Benchmark of the local backend on examples/hello.

Measures, on a private copy of the example with its own state dir and router port:
  1. time from `shipway deploy` start to the new release serving through the router
     (the cold first deploy, then the median of several redeploys);
  2. failed requests during 20 redeploys under a loopback load (client threads sending
     GET / in a loop; bounded in count and time).

Run:  .venv/bin/python bench/local_deploy.py [--runs 7] [--redeploys 20] [--clients 4]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from shipway.backends.local.supervisor import Supervisor  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": "hello.localhost"})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


class Bench:
    def __init__(self, workdir: Path) -> None:
        self.app = workdir / "hello"
        shutil.copytree(
            REPO / "examples" / "hello", self.app, ignore=shutil.ignore_patterns("__pycache__")
        )
        self.state = workdir / "state"
        self.port = free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPWAY_")}
        self.env.update(SHIPWAY_STATE_DIR=str(self.state), SHIPWAY_ROUTER_PORT=str(self.port))
        self.greeting = "hello"

    def set_greeting(self, value: str) -> None:
        spec = self.app / "shipway.toml"
        text = spec.read_text()
        spec.write_text(text.replace(f'GREETING = "{self.greeting}"', f'GREETING = "{value}"'))
        self.greeting = value

    def deploy_until_serving(self, value: str) -> float:
        """Seconds from starting `shipway deploy` to GET / answering with ``value``."""
        self.set_greeting(value)
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "shipway", "-f", str(self.app), "deploy", "local"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        served = None
        while time.monotonic() - start < 120:
            try:
                status, body = get(self.port)
            except OSError:
                status, body = 0, ""
            if status == 200 and body.startswith(value + " "):
                served = time.monotonic() - start
                break
            time.sleep(0.01)
        code = proc.wait(timeout=120)
        if code != 0 or served is None:
            raise SystemExit(f"deploy failed (exit {code}) or never served {value!r}")
        return served

    def shutdown(self) -> None:
        Supervisor(self.state / "supervisor").shutdown()


def load(port: int, stop: threading.Event, counts: dict[str, int], lock: threading.Lock) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(200_000):
        if stop.is_set():
            break
        try:
            conn.request("GET", "/", headers={"Host": "hello.localhost"})
            r = conn.getresponse()
            r.read()
            key = "ok" if r.status == 200 else "failed"
        except (OSError, http.client.HTTPException):
            key = "failed"
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        with lock:
            counts[key] += 1
    conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description="local backend benchmark on examples/hello")
    parser.add_argument("--runs", type=int, default=7, help="redeploys timed (median)")
    parser.add_argument("--redeploys", type=int, default=20, help="redeploys under load")
    parser.add_argument("--clients", type=int, default=4, help="concurrent load clients")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shipway-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            cold = bench.deploy_until_serving("cold")
            times = [bench.deploy_until_serving(f"run{i}") for i in range(args.runs)]
            counts = {"ok": 0, "failed": 0}
            lock = threading.Lock()
            stop = threading.Event()
            clients = [
                threading.Thread(target=load, args=(bench.port, stop, counts, lock))
                for _ in range(args.clients)
            ]
            for c in clients:
                c.start()
            started = time.monotonic()
            try:
                for i in range(args.redeploys):
                    bench.deploy_until_serving(f"load{i}")
            finally:
                stop.set()
                for c in clients:
                    c.join(timeout=30)
            elapsed = time.monotonic() - started
        finally:
            bench.shutdown()
    total = counts["ok"] + counts["failed"]
    print(f"first deploy (cold: starts supervisord and the router) to serving: {cold:.2f}s")
    print(
        f"redeploy to serving, median of {args.runs}: {statistics.median(times):.2f}s "
        f"(min {min(times):.2f}s, max {max(times):.2f}s)"
    )
    print(
        f"{args.redeploys} redeploys under load ({args.clients} clients, {elapsed:.1f}s): "
        f"{counts['failed']} failed of {total} requests ({total / elapsed:.0f} req/s)"
    )
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
