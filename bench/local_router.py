"""The local router's added latency: direct to an app process, through shipway's router, and
through Caddy in front of the same process, in the same run.

Four client processes send GET / at once; each request on a new connection (the first
variant) or all on one kept-alive connection per client (the second). Targets are
measured in interleaved rounds (the order shuffled each round); per round: p50 and p99 of
every target; printed: the median over the rounds of each, the ratio to direct, and the
latency each proxy *adds* (its figure minus direct's in the same round) — the router's
against Caddy's — and the CPU time each proxy process spent per request (user and system,
from /proc: a figure the machine's other load moves far less than latency).

The app process (``--origin``): ``asyncio``, a small HTTP/1.1 server that keeps
connections alive (so keep-alive to the backend is exercised), or ``hello``, the example
app (standard library, HTTP/1.0: one connection per request). Caddy is the one the testenv
builds (``scripts/docker-testenv``: v2.11.9 in its cache), ``caddy`` on the PATH, or
``--caddy PATH``; without one the Caddy column is left out and said so.

    .venv/bin/python bench/local_router.py [--rounds 7] [--requests 250] [--origin asyncio]
        [--old-router [LABEL=]PATH ...]   # other router.py files (e.g. main's, a variant's)
                                           # measured in the same run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchlib import Run, cpu_seconds, median, percentile

REPO = Path(__file__).resolve().parents[1]
ROUTER = REPO / "src" / "shipway" / "backends" / "local" / "router.py"
TESTENV_CADDY = Path("/var/cache/shipway/caddy-v2.11.9/bin/caddy")
HOST = "bench.localhost"
CLIENTS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: port -> the pid of the proxy serving it (its CPU time is read around every round)
PIDS: dict[int, int] = {}


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} never listened on {port}")


# -- the app process ----------------------------------------------------------------------


class Origin(asyncio.Protocol):
    """HTTP/1.1, keep-alive, GET only: answers ``hello\\n``; enough for a latency floor."""

    BODY = b"hello from the bench origin\n"
    ANSWER = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
        + str(len(BODY)).encode()
        + b"\r\n\r\n"
        + BODY
    )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            self.transport.write(self.ANSWER)
            if b"connection: close" in head.lower():
                self.transport.close()
                return


def serve_origin(port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Origin, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


@contextmanager
def origin(kind: str) -> Iterator[int]:
    port = free_port()
    if kind == "hello":
        cmd = [sys.executable, str(REPO / "examples" / "hello" / "app.py")]
        env = {**os.environ, "PORT": str(port), "GREETING": "hello"}
    else:
        cmd = [sys.executable, __file__, "--serve-origin", str(port)]
        env = dict(os.environ)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, f"the {kind} origin")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- the proxies --------------------------------------------------------------------------


@contextmanager
def router(script: Path, upstream: int, work: Path, env: dict[str, str]) -> Iterator[int]:
    port = free_port()
    tables = work / f"tables-{port}"
    tables.mkdir()
    upstreams = [f"127.0.0.1:{upstream}"]
    hosts = {HOST: {"program": "p", "upstreams": upstreams}}
    doc = {"app": "bench", "slot": "bench", "hosts": hosts}
    (tables / "bench.bench.json").write_text(json.dumps(doc))
    cmd = [sys.executable, str(script), "--port", str(port), "--tables", str(tables)]
    cmd += ["--control", str(work / f"control-{port}.sock")]
    proc = subprocess.Popen(
        cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_port(port, proc, f"the router {script}")
        PIDS[port] = proc.pid
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def find_caddy(given: str | None) -> str | None:
    if given:
        return given
    if TESTENV_CADDY.exists():
        return str(TESTENV_CADDY)
    return shutil.which("caddy")


@contextmanager
def caddy(binary: str, upstream: int, work: Path) -> Iterator[int]:
    port = free_port()
    config = {
        "admin": {"disabled": True},
        "logging": {"logs": {"default": {"level": "ERROR"}}},
        "apps": {
            "http": {
                "servers": {
                    "bench": {
                        "listen": [f"127.0.0.1:{port}"],
                        "automatic_https": {"disable": True},
                        "routes": [
                            {
                                "match": [{"host": [HOST]}],
                                "handle": [
                                    {
                                        "handler": "reverse_proxy",
                                        "upstreams": [{"dial": f"127.0.0.1:{upstream}"}],
                                    }
                                ],
                            }
                        ],
                    }
                }
            }
        },
    }
    path = work / f"caddy-{port}.json"
    path.write_text(json.dumps(config))
    env = {**os.environ, "XDG_CONFIG_HOME": str(work), "XDG_DATA_HOME": str(work)}
    proc = subprocess.Popen(
        [binary, "run", "--config", str(path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, proc, "caddy")
        PIDS[port] = proc.pid
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- the clients --------------------------------------------------------------------------

REQUEST = f"GET / HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: bench\r\n\r\n".encode()


def _response(sock: socket.socket, buffer: bytes) -> bytes:
    """Read one response (Content-Length framed) from ``sock``; what follows it is returned."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("closed before the response head")
        buffer += chunk
    head, rest = buffer.split(b"\r\n\r\n", 1)
    if not head.startswith(b"HTTP/1.") or head[9:12] != b"200":
        raise OSError(f"answer: {head[:60]!r}")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("closed inside the body")
        rest += chunk
    return rest[length:]


def client(job: tuple[int, int, bool]) -> tuple[list[float], int]:
    """``requests`` GETs to ``port``: latencies in ms, and the count of failed ones."""
    port, requests, keepalive = job
    times: list[float] = []
    failed = 0
    sock: socket.socket | None = None
    buffer = b""
    for _ in range(requests):
        try:
            if keepalive and sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buffer = b""
            start = time.perf_counter()
            if not keepalive:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buffer = b""
            assert sock is not None
            sock.sendall(REQUEST)
            buffer = _response(sock, buffer)
            times.append((time.perf_counter() - start) * 1000)
            if not keepalive:
                sock.close()
                sock = None
        except OSError:
            failed += 1
            if sock is not None:
                sock.close()
            sock = None
    if sock is not None:
        sock.close()
    return times, failed


# -- the run ------------------------------------------------------------------------------


def measure(
    pool: Any, targets: dict[str, int], rounds: int, requests: int, keepalive: bool
) -> dict[str, Any]:
    per_round: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    failed = dict.fromkeys(targets, 0)
    cpu = dict.fromkeys(targets, 0.0)  # the proxy's CPU seconds, over all rounds
    answered = dict.fromkeys(targets, 0)
    for i in range(rounds):
        order = list(targets)
        random.shuffle(order)
        for name in order:
            pid = PIDS.get(targets[name])
            before = cpu_seconds(pid) if pid else 0.0
            results = pool.map(client, [(targets[name], requests, keepalive)] * CLIENTS)
            cpu[name] += cpu_seconds(pid) - before if pid else 0.0
            answered[name] += sum(len(ts) for ts, _ in results)
            times = [t for ts, _ in results for t in ts]
            failed[name] += sum(f for _, f in results)
            per_round[name].append({"p50": percentile(times, 50), "p99": percentile(times, 99)})
        line = "  ".join(
            f"{n} {per_round[n][-1]['p50']:.2f}/{per_round[n][-1]['p99']:.2f}" for n in targets
        )
        print(f"  round {i + 1}/{rounds} (p50/p99 ms): {line}", flush=True)
    out: dict[str, Any] = {}
    direct = per_round["direct"]
    for name, figures in per_round.items():
        entry: dict[str, Any] = {
            "p50_ms": round(median([f["p50"] for f in figures]), 3),
            "p99_ms": round(median([f["p99"] for f in figures]), 3),
            "failed": failed[name],
            # what a request costs the proxy in CPU, whatever else the machine runs
            "cpu_us_per_request": round(cpu[name] / max(answered[name], 1) * 1e6, 1),
        }
        if name != "direct":
            for p in ("p50", "p99"):
                entry[f"{p}_ratio_to_direct"] = round(
                    median([f[p] / d[p] for f, d in zip(figures, direct, strict=True)]), 3
                )
                entry[f"{p}_added_ms"] = round(
                    median([f[p] - d[p] for f, d in zip(figures, direct, strict=True)]), 3
                )
        out[name] = entry
    if "caddy" in per_round:
        for name in per_round:
            if name in ("direct", "caddy"):
                continue
            for p in ("p50", "p99"):
                added = [
                    (f[p] - d[p]) / max(c[p] - d[p], 1e-6)
                    for f, c, d in zip(per_round[name], per_round["caddy"], direct, strict=True)
                ]
                out[name][f"{p}_added_ratio_to_caddy"] = round(median(added), 3)
    return out


def report(title: str, figures: dict[str, Any]) -> None:
    print(title)
    for name, f in figures.items():
        line = f"  {name:14s} p50 {f['p50_ms']:7.2f} ms  p99 {f['p99_ms']:7.2f} ms"
        if name != "direct":
            line += (
                f"  x direct {f['p50_ratio_to_direct']:.2f}/{f['p99_ratio_to_direct']:.2f}"
                f"  adds {f['p50_added_ms']:.2f}/{f['p99_added_ms']:.2f} ms"
            )
        if "p50_added_ratio_to_caddy" in f:
            line += (
                f"  added vs caddy's {f['p50_added_ratio_to_caddy']:.2f}"
                f"/{f['p99_added_ratio_to_caddy']:.2f}"
            )
        if f.get("cpu_us_per_request"):
            line += f"  cpu {f['cpu_us_per_request']:.0f} us/request"
        if f["failed"]:
            line += f"  FAILED {f['failed']}"
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--requests", type=int, default=250, help="per client per target per round")
    ap.add_argument("--origin", choices=("asyncio", "hello"), default="asyncio")
    ap.add_argument("--caddy", help="the caddy binary (default: the testenv's, else PATH)")
    ap.add_argument(
        "--old-router",
        action="append",
        default=[],
        metavar="[LABEL=]PATH",
        help="another router.py measured beside (repeatable; LABEL names its column)",
    )
    ap.add_argument("--loops", default="default", help="router loop variants: default,asyncio")
    ap.add_argument("--only", choices=("new", "keepalive", "both"), default="both")
    ap.add_argument("--json", type=Path, help="where the figures go")
    ap.add_argument("--serve-origin", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_origin:
        serve_origin(args.serve_origin)
        return 0
    run = Run("local_router", {k: str(v) for k, v in vars(args).items()})
    binary = find_caddy(args.caddy)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sw-router-bench-")))
        upstream = stack.enter_context(origin(args.origin))
        targets = {"direct": upstream}
        for loop in args.loops.split(","):
            env = {} if loop == "default" else {"SHIPWAY_ROUTER_LOOP": loop}
            label = "router" if loop == "default" else f"router-{loop}"
            targets[label] = stack.enter_context(router(ROUTER, upstream, work, env))
        for given in args.old_router:
            label, _, path = given.rpartition("=")
            label = label or ("old-router" if len(args.old_router) == 1 else Path(path).parent.name)
            targets[label] = stack.enter_context(router(Path(path), upstream, work, {}))
        if binary:
            targets["caddy"] = stack.enter_context(caddy(binary, upstream, work))
        else:
            print("no caddy binary found: the Caddy column is left out")
        pool = stack.enter_context(multiprocessing.get_context("fork").Pool(CLIENTS))
        figures: dict[str, Any] = {"origin": args.origin, "caddy": binary}
        variants = {"new": False, "keepalive": True}
        for variant, keepalive in variants.items():
            if args.only not in ("both", variant):
                continue
            title = "a new connection per request" if not keepalive else "kept-alive connections"
            print(f"{CLIENTS} clients, {title}, {args.rounds} rounds x {args.requests} requests")
            figures[f"{variant}_connection" if not keepalive else "keepalive"] = result = measure(
                pool, targets, args.rounds, args.requests, keepalive
            )
            report(f"{title} (medians over rounds):", result)
    doc = run.finish(figures, args.json)
    failed = sum(
        f["failed"] for key in ("new_connection", "keepalive") for f in doc.get(key, {}).values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
