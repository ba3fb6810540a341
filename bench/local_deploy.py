"""Benchmark of the local backend's redeploy, on examples/hello or examples/django.

Measures, on a private copy of the example with its own state dir and router port:
  1. time from `shipway deploy` start to the new release serving through the router
     (the cold first deploy, then the median of several redeploys, each changing only the
     env's ``GREETING``: the dependencies are unchanged, so a built environment is
     reused), against its peer in the same run, interleaved: starting the same processes
     directly (the spec's commands, with ``PORT``, its env and secrets, and the built
     environment first on ``PATH`` — ``python3 app.py`` and ``python3 worker.py`` for
     hello, gunicorn serving the Django project for django) until the web one answers its
     health check; and when the command returns (after the serving moment, the gates of
     processes no route goes to — hello's worker must stay up 1 s — and the old release's
     drain);
  2. where a redeploy's time goes: each line the deploy prints, timed from its start
     (the CLI's start, the plan, each step — the build step, the release command —, the
     switch);
  3. failed requests during 20 redeploys under a loopback load (client threads sending
     GET / in a loop; bounded in count and time).

Run:  .venv/bin/python bench/local_deploy.py [--example hello|django] [--runs 7]
      [--redeploys 20] [--clients 4]
"""

from __future__ import annotations

import argparse
import http.client
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from shipway.backends.local.launch import expand  # noqa: E402
from shipway.backends.local.supervisor import Supervisor  # noqa: E402
from shipway.spec.load import load as load_spec  # noqa: E402
from shipway.spec.secrets import resolve_all  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from benchlib import Run, median, user_environ  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Example:
    """What the bench needs to know of an example: its directory under examples/, its app's
    name, the ``GREETING`` its spec starts with, and how its page shows a greeting (a
    regular expression, ``{}`` where the greeting goes)."""

    directory: str
    app: str
    greeting: str
    shows: str

    @property
    def host(self) -> str:
        return f"{self.app}.localhost"

    def served(self, body: str, value: str) -> bool:
        return re.search(self.shows.format(re.escape(value)), body) is not None


EXAMPLES = {
    "hello": Example("hello", "hello", "hello", "^{} from r"),
    "django": Example("django", "guestbook", "guestbook", "<h1>{}</h1>"),
}


def get(port: int, host: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": host})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


class Bench:
    def __init__(self, workdir: Path, example: str, bytecode: bool = True) -> None:
        self.example = EXAMPLES[example]
        self.app = workdir / self.example.directory
        shutil.copytree(
            REPO / "examples" / self.example.directory,
            self.app,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        self.state = workdir / "state"
        self.port = free_port()
        environ = user_environ(bytecode)
        self.env = {k: v for k, v in environ.items() if not k.startswith("SHIPWAY_")}
        self.env.update(SHIPWAY_STATE_DIR=str(self.state), SHIPWAY_ROUTER_PORT=str(self.port))
        self.greeting = self.example.greeting

    def set_greeting(self, value: str) -> None:
        spec = self.app / "shipway.toml"
        text = spec.read_text()
        old, new = f'GREETING = "{self.greeting}"', f'GREETING = "{value}"'
        if old not in text:
            raise SystemExit(f"{spec} has no line {old}: the bench changes that env")
        spec.write_text(text.replace(old, new))
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
                status, body = get(self.port, self.example.host)
            except OSError:
                status, body = 0, ""
            if status == 200 and self.example.served(body, value):
                served = time.monotonic() - start
                break
            time.sleep(0.01)
        code = proc.wait(timeout=120)
        self.returned = time.monotonic() - start
        reader.join(timeout=10)
        self.timeline.append((served or 0.0, "(the new release serves)"))
        if code != 0 or served is None:
            raise SystemExit(f"deploy failed (exit {code}) or never served {value!r}")
        return served

    def built_environment(self) -> dict[str, str]:
        """PATH (and VIRTUAL_ENV) of the environment the deploys built, as the processes
        get them; nothing when the app has no dependencies to build."""
        envs = sorted((self.state / self.example.app / "local" / "envs").glob("*/bin"))
        if not envs:
            return {}
        if len(envs) > 1:
            raise SystemExit(f"more than one environment, unchanged dependencies: {envs}")
        bin_dir = envs[0]
        return {"PATH": f"{bin_dir}:{self.env.get('PATH', '')}", "VIRTUAL_ENV": str(bin_dir.parent)}

    def direct(self) -> float:
        """The peer: the spec's processes started directly (their commands with ``PORT``,
        the env, the secrets and the built environment), until the web one answers its
        health check."""
        spec = load_spec(self.app / "shipway.toml")
        port = free_port()
        secrets = {k: s.reveal() for k, s in resolve_all(spec.secrets, self.env).items()}
        env = {**self.env, **spec.env, **secrets, **self.built_environment(), "PORT": str(port)}
        web = spec.processes["web"]
        path = web.healthcheck.path if web.healthcheck and web.healthcheck.path else "/"
        start = time.monotonic()
        procs = [
            subprocess.Popen([expand(word, env) for word in p.command or ()], cwd=self.app,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for p in spec.processes.values()
        ]  # fmt: skip
        try:
            while time.monotonic() - start < 60:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    conn.request("GET", path)
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


def load(
    port: int, host: str, stop: threading.Event, counts: dict[str, int], lock: threading.Lock
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(200_000):
        if stop.is_set():
            break
        try:
            conn.request("GET", "/", headers={"Host": host})
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
    parser = argparse.ArgumentParser(description="local backend redeploy benchmark")
    parser.add_argument(
        "--example", choices=sorted(EXAMPLES), default="hello", help="examples/<this>"
    )
    parser.add_argument("--runs", type=int, default=7, help="redeploys timed (median)")
    parser.add_argument("--redeploys", type=int, default=20, help="redeploys under load")
    parser.add_argument("--clients", type=int, default=4, help="concurrent load clients")
    parser.add_argument("--json", type=Path, help="where the figures go")
    parser.add_argument(
        "--no-bytecode", action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE (every start compiles shipway again)",
    )  # fmt: skip
    args = parser.parse_args()
    name = "local_deploy" if args.example == "hello" else f"local_deploy_{args.example}"
    run = Run(name, {k: str(v) for k, v in vars(args).items()})
    with tempfile.TemporaryDirectory(prefix="shipway-bench-") as tmp:
        bench = Bench(Path(tmp), args.example, bytecode=not args.no_bytecode)
        try:
            cold = bench.deploy_until_serving("cold")
            times: list[float] = []
            returns: list[float] = []
            directs: list[float] = []
            timelines: list[list[tuple[float, str]]] = []
            for i in range(args.runs):
                if i % 2:
                    directs.append(bench.direct())
                times.append(bench.deploy_until_serving(f"run{i}"))
                returns.append(bench.returned)
                timelines.append(bench.timeline)
                if not i % 2:
                    directs.append(bench.direct())
            counts = {"ok": 0, "failed": 0}
            lock = threading.Lock()
            stop = threading.Event()
            clients = [
                threading.Thread(
                    target=load, args=(bench.port, bench.example.host, stop, counts, lock)
                )
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
        f"the command returned, median: {median(returns):.2f}s (after the gates no route "
        "waits for, and the old release's drain)"
    )
    ratios = [t / d for t, d in zip(times, directs, strict=True)]
    print(
        f"the same processes started directly, until the web one answers: median "
        f"{median(directs):.2f}s; redeploy x {median(ratios):.2f} of it"
    )
    middle = sorted(range(len(times)), key=lambda i: times[i])[len(times) // 2]
    print("where the median redeploy's time goes (seconds from `shipway deploy`):")
    for at, line in sorted(timelines[middle], key=lambda entry: entry[0]):
        if line.startswith(("deploy ", "[", "  release |", "serving", "rolled", "(the new")):
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
            "returned_median_s": round(median(returns), 3),
            "direct_start_median_s": round(median(directs), 3),
            "ratio_to_direct_start": round(median(ratios), 2),
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
