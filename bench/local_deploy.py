"""Benchmark of the local backend on examples/hello.

Measures, on a private copy of the example with its own state dir and router port:
  1. time from `shipway deploy` start to the new release serving through the router
     (the cold first deploy, then the median of several redeploys), against its peer in
     the same run, interleaved: starting the same two processes directly (``python3
     app.py`` and ``python3 worker.py``) until the web one answers — and that plus the
     worker's uptime gate (``initial_delay``, 1 s: no route moves before it passed);
  2. where a redeploy's time goes: each line the deploy prints, timed from its start
     (the CLI's start, the plan, each step, the switch);
  3. failed requests during 20 redeploys under a loopback load (client threads sending
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

sys.path.insert(0, str(REPO / "bench"))
from benchlib import Run, median  # noqa: E402


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
        """Seconds from starting `shipway deploy` to GET / answering with ``value``; the
        deploy's lines, timed, go to ``self.timeline``."""
        self.set_greeting(value)
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "shipway", "-f", str(self.app), "deploy", "local"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.timeline: list[tuple[float, str]] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.timeline.append((time.monotonic() - start, line.rstrip()))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
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
        reader.join(timeout=10)
        self.timeline.append((served or 0.0, "(the new release serves)"))
        if code != 0 or served is None:
            raise SystemExit(f"deploy failed (exit {code}) or never served {value!r}")
        return served

    def direct(self) -> float:
        """The peer: the same two processes started directly, until the web one answers."""
        port = free_port()
        env = {**self.env, "PORT": str(port), "GREETING": "direct"}
        start = time.monotonic()
        procs = [
            subprocess.Popen(["python3", name], cwd=self.app, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name in ("app.py", "worker.py")
        ]  # fmt: skip
        try:
            while time.monotonic() - start < 60:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    conn.request("GET", "/up")
                    if conn.getresponse().status == 200:
                        return time.monotonic() - start
                except OSError:
                    pass
                finally:
                    conn.close()
                time.sleep(0.01)
            raise SystemExit("the directly started app never answered")
        finally:
            for p in procs:
                p.terminate()
                p.wait(timeout=10)

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
    parser.add_argument("--json", type=Path, help="where the figures go")
    args = parser.parse_args()
    run = Run("local_deploy", {k: str(v) for k, v in vars(args).items()})
    with tempfile.TemporaryDirectory(prefix="shipway-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            cold = bench.deploy_until_serving("cold")
            times: list[float] = []
            directs: list[float] = []
            timelines: list[list[tuple[float, str]]] = []
            for i in range(args.runs):
                if i % 2:
                    directs.append(bench.direct())
                times.append(bench.deploy_until_serving(f"run{i}"))
                timelines.append(bench.timeline)
                if not i % 2:
                    directs.append(bench.direct())
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
    gate = 1.0  # the example worker's initial_delay: no route moves before it passed
    ratios = [t / d for t, d in zip(times, directs, strict=True)]
    ratios_gate = [t / (d + gate) for t, d in zip(times, directs, strict=True)]
    print(
        f"the same processes started directly, until the web one answers: median "
        f"{median(directs):.2f}s; redeploy x {median(ratios):.2f} of it, x "
        f"{median(ratios_gate):.2f} of it plus the worker's {gate:g}s uptime gate"
    )
    middle = sorted(range(len(times)), key=lambda i: times[i])[len(times) // 2]
    print("where the median redeploy's time goes (seconds from `shipway deploy`):")
    for at, line in timelines[middle]:
        if line.startswith(("deploy ", "[", "serving", "rolled", "(the new")):
            print(f"  {at:5.2f}  {line[:100]}")
    print(
        f"{args.redeploys} redeploys under load ({args.clients} clients, {elapsed:.1f}s): "
        f"{counts['failed']} failed of {total} requests ({total / elapsed:.0f} req/s)"
    )
    run.finish(
        {
            "cold_first_deploy_s": round(cold, 3),
            "redeploy_median_s": round(median(times), 3),
            "redeploy_all_s": [round(t, 3) for t in times],
            "direct_start_median_s": round(median(directs), 3),
            "ratio_to_direct_start": round(median(ratios), 2),
            "ratio_to_direct_start_plus_worker_gate": round(median(ratios_gate), 2),
            "median_redeploy_timeline": [[round(a, 3), ln] for a, ln in timelines[middle]],
            "redeploys_under_load": args.redeploys,
            "requests_ok": counts["ok"],
            "requests_failed": counts["failed"],
        },
        args.json,
    )
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
