"""Benchmark of canary releases on the local backend and on two Docker hosts (docs/canary.md).

On a private app (standard library only) — local: with its own state dir and router port;
docker (``--backends docker``): on both hosts of ``scripts/docker-testenv``, in the
python test image, behind each host's shared Caddy on a port of its own, the loop's requests
alternating between the two hosts — r1 is deployed, then for each request rate (a bounded
loop: one new connection per request, paced at RATE a second, at most 20,000 requests) each
scenario is a real `shipway deploy` of a
canary beside the stable, steps [10, 50, 100]:

  broken   every request of the canary answers 500
  partly   5 % of the canary's requests answer 500
  slow     the canary answers 200 ms later
  good     an identical canary: promoted through its steps, the stable goes

For each: the deploy's outcome and exit code; for an abort, the time from the canary's
first bad answer (a 5xx, or for `slow` an answer of 200 ms or more) seen by the client to
its last answer from the canary, and the failed (bad) requests in that time; for `good`,
the deploy's time and the failed requests. The false-abort rate is the pure test's
(plan/canary.py) over `--false-runs` simulated canaries of two identical releases at the
tolerated error rate, checked after every request: the same code that decides a deploy.

Run:  .venv/bin/python bench/canary.py [--rates 10,100] [--scenarios broken,partly,slow,good]
      [--false-runs 1000] [--backends local,docker]
(docker: eval "$(scripts/docker-testenv env)" first)
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from shipway.backends.local.supervisor import Supervisor  # noqa: E402
from shipway.plan.canary import Tally, error_test  # noqa: E402
from shipway.spec.canary import Canary  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from benchlib import Run, user_environ  # noqa: E402

APP = """\
import http.server, os, random, socketserver, time
SHARE = float(os.environ.get("BAD_SHARE", "0"))
DELAY = float(os.environ.get("DELAY", "0"))
RELEASE = os.environ.get("SHIPWAY_RELEASE") or "run" + os.environ.get("RUN", "0")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path == "/up":
            code = 200
        else:
            time.sleep(DELAY)
            code = 500 if random.random() < SHARE else 200
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.send_header("X-Release", RELEASE)
        self.end_headers()
    def log_message(self, *args):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 128
S((os.environ.get("BIND", "127.0.0.1"), int(os.environ["PORT"])), H).serve_forever()
"""

SPEC = """\
[app]
name = "canarybench"
[processes.web]
command = "python3 app.py"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 50
[env]
BAD_SHARE = "@BAD@"
DELAY = "@SLOW@"
RUN = "@N@"
[slots.local]
strategy = "canary"
[slots.local.canary]
steps = [10, 50, 100]
step_time = "@STEP@"
timeout = "3m"
"""

DOCKER_SPEC = """\
[app]
name = "@NAME@"
image = "@IMAGE@"
[processes.web]
command = "python3 /bench_app.py"
port = 8080
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 100
[env]
BAD_SHARE = "@BAD@"
DELAY = "@SLOW@"
RUN = "@N@"
BIND = "0.0.0.0"
PORT = "8080"
[files]
"bench_app.py" = '''@APP@'''
[[routes]]
host = "@HOST@"
process = "web"
[slots.test]
backend = "docker"
hosts = [@HOSTS@]
proxy_image = "@PROXY@"
proxy_port = @PORT@
drain_timeout = "1s"
strategy = "canary"
[slots.test.canary]
steps = [10, 50, 100]
step_time = "@STEP@"
timeout = "3m"
"""

SCENARIOS = {
    "broken": ("1", "0"),
    "partly": ("0.05", "0"),
    "slow": ("0", "0.2"),
    "good": ("0", "0"),
}
HOST = "canarybench.localhost"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Setup:
    """Where a backend's canary runs: its spec (``bad``, ``slow``, ``n``, ``step``), the
    slot, the CLI's environment, and the addresses the loop's requests alternate over."""

    spec: Callable[[str, str, int, str], str]
    slot: str
    env: dict[str, str]
    endpoints: list[tuple[str, int]]
    host: str


class Load:
    def __init__(self, endpoints: list[tuple[str, int]], host: str, rate: float,
                 limit: int = 20_000) -> None:  # fmt: skip
        self.endpoints, self.host, self.rate, self.limit = endpoints, host, rate, limit
        self.answers: list[tuple[float, float, int, str]] = []  # start, took, status, release
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        for i in range(self.limit):
            if self.stop.is_set():
                return
            began = time.monotonic()
            status, release = 0, ""
            address, port = self.endpoints[i % len(self.endpoints)]
            try:
                conn = http.client.HTTPConnection(address, port, timeout=10)
                conn.request("GET", "/", headers={"Host": self.host})
                response = conn.getresponse()
                response.read()
                status, release = response.status, response.getheader("X-Release") or ""
                conn.close()
            except OSError:
                pass
            took = time.monotonic() - began
            self.answers.append((began, took, status, release))
            self.stop.wait(max(0.0, 1 / self.rate - took))


def scenario(
    app: Path, setup: Setup, backend: str, name: str, rate: float, n: int
) -> dict[str, Any]:
    bad, slow = SCENARIOS[name]
    spec = app / "shipway.toml"
    spec.write_text(setup.spec(bad, slow, n, "5s"))
    load = Load(setup.endpoints, setup.host, rate)
    load.thread.start()
    time.sleep(1.0)  # the stable's traffic first (a paced loop, not a wait on a condition)
    began = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "shipway", "-f", str(spec), "deploy", setup.slot],
        env=setup.env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    took = time.monotonic() - began
    time.sleep(1.0)
    load.stop.set()
    load.thread.join(timeout=30)
    canary = [a for a in load.answers if a[3] and a[3] != load.answers[0][3]]
    outcome = "rolled" if p.returncode == 0 else "rolled-back" if p.returncode == 10 else "?"
    out: dict[str, Any] = {
        "backend": backend,
        "scenario": name,
        "rate": rate,
        "exit": p.returncode,
        "outcome": outcome,
        "deploy_s": round(took, 2),
        "requests": len(load.answers),
        "failed_total": sum(1 for a in load.answers if a[2] != 200),
    }

    def is_bad(a: tuple[float, float, int, str]) -> bool:
        return a[2] != 200 or (name == "slow" and a[1] >= 0.2)

    bads = [a for a in canary if is_bad(a)]
    if bads and p.returncode == 10:
        first, last = bads[0][0], max(a[0] for a in canary)
        out["first_bad_to_abort_s"] = round(last - first, 2)
        out["bad_in_that_time"] = sum(1 for a in canary if a[0] >= first and is_bad(a))
    if p.returncode not in (0, 10):
        out["tail"] = (p.stdout + p.stderr)[-600:]
    print(f"  {out}", flush=True)
    return out


def false_aborts(runs: int, seed: int = 35) -> dict[str, Any]:
    """The pure error test over simulated canaries of two identical releases at the
    tolerated rate (1 %), checked after every canary request."""
    rng = random.Random(seed)
    rules = Canary(step_time=0.0, step_requests=100)
    aborted = 0
    for _ in range(runs):
        for percent in rules.analysed:
            c = cb = s = sb = 0
            verdict = ""
            while not verdict:
                if rng.random() >= percent / 100:
                    s += 1
                    sb += rng.random() < 0.01
                    continue
                c += 1
                cb += rng.random() < 0.01
                state = error_test(rules, Tally(c, cb), Tally(s, sb)).state
                if state == "failing":
                    verdict = "abort"
                elif state == "passing" and c >= rules.step_requests:
                    verdict = "promote"
            if verdict == "abort":
                aborted += 1
                break
    return {"runs": runs, "aborted": aborted, "rate": round(aborted / runs, 4)}


def local_setup(tmp: Path) -> Setup:
    port = free_port()
    env = {k: v for k, v in user_environ().items() if not k.startswith("SHIPWAY_")}
    env.update(SHIPWAY_STATE_DIR=str(tmp / "state"), SHIPWAY_ROUTER_PORT=str(port))

    def spec(bad: str, slow: str, n: int, step: str) -> str:
        text = SPEC.replace("@BAD@", bad).replace("@SLOW@", slow).replace("@N@", str(n))
        return text.replace("@STEP@", step)

    return Setup(spec, "local", env, [("127.0.0.1", port)], HOST)


def docker_setup() -> tuple[Setup, Callable[[], None]]:
    """The app on both test hosts, and what removes it from them afterwards."""
    sys.path.insert(0, str(REPO))
    from tests.testenv.docker import ensure_docker_env

    denv = ensure_docker_env()
    env = {k: v for k, v in user_environ().items() if not k.startswith("SHIPWAY_")}
    env["SHIPWAY_SSH_CONFIG"] = str(denv.ssh_home / ".ssh" / "config")
    env["SHIPWAY_KNOWN_HOSTS"] = str(denv.known_hosts)
    name, port, host = f"canarybench{uuid.uuid4().hex[:6]}", free_port(), "canarybench.test"
    hosts = ", ".join(f'"{h.url}"' for h in (denv.a, denv.b))

    def spec(bad: str, slow: str, n: int, step: str) -> str:
        values = {"@NAME@": name, "@IMAGE@": denv.images.python, "@APP@": APP, "@HOST@": host,
                  "@HOSTS@": hosts, "@PROXY@": denv.images.proxy, "@PORT@": str(port),
                  "@BAD@": bad, "@SLOW@": slow, "@N@": str(n), "@STEP@": step}  # fmt: skip
        text = DOCKER_SPEC
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    def cleanup() -> None:
        for h in (denv.a, denv.b):
            client = denv.local_client(h)
            try:
                label = {"label": [f"org.shipway.app={name}"]}
                for c in client.containers.list(all=True, filters=label):
                    c.remove(force=True)
                for v in client.volumes.list(filters=label):
                    v.remove(force=True)
                for proxy in (f"shipway-proxy-{port}", f"shipway-proxy-{port}-lock"):
                    for c in client.containers.list(all=True, filters={"name": f"^{proxy}$"}):
                        c.remove(force=True)
                for volume in (f"shipway-proxy-{port}", f"shipway-proxy-{port}-data"):
                    for v in client.volumes.list(filters={"name": f"^{volume}$"}):
                        v.remove(force=True)
                for network in client.networks.list(filters=label):
                    network.remove()
            finally:
                client.close()

    endpoints = [(h.address, port) for h in (denv.a, denv.b)]
    return Setup(spec, "test", env, endpoints, host), cleanup


def run_backend(backend: str, rates: list[float], names: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "app"
        app.mkdir()
        (app / "app.py").write_text(APP)
        if backend == "docker":
            setup, cleanup = docker_setup()
        else:
            setup = local_setup(Path(tmp))

            def cleanup() -> None:
                Supervisor(Path(tmp) / "state" / "supervisor").shutdown()

        (app / "shipway.toml").write_text(setup.spec("0", "0", 0, "5s"))
        try:
            first = subprocess.run(
                [sys.executable, "-m", "shipway", "-f", str(app / "shipway.toml"), "deploy",
                 setup.slot],
                env=setup.env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            assert first.returncode == 0, first.stdout + first.stderr
            n = 0
            for rate in rates:
                for name in names:
                    n += 1
                    out.append(scenario(app, setup, backend, name, rate, n))
        finally:
            cleanup()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="10,100")
    parser.add_argument("--scenarios", default="broken,partly,slow,good")
    parser.add_argument("--false-runs", type=int, default=1000)
    parser.add_argument("--backends", default="local")
    args = parser.parse_args()
    run = Run("canary", vars(args))
    figures: dict[str, Any] = {"scenarios": []}
    rates = [float(r) for r in args.rates.split(",")]
    for backend in args.backends.split(","):
        figures["scenarios"] += run_backend(backend, rates, args.scenarios.split(","))
    figures["false_aborts"] = false_aborts(args.false_runs)
    print(f"  false aborts (simulated): {figures['false_aborts']}")
    run.finish(figures)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
