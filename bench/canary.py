"""Benchmark of canary releases on the local backend (docs/canary.md).

On a private app (standard library only) with its own state dir and router port, r1 is
deployed, then for each request rate (a bounded loop: one new connection per request, paced
at RATE a second, at most 20,000 requests) each scenario is a real `shipway deploy` of a
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
      [--false-runs 1000]
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
RELEASE = os.environ.get("SHIPWAY_RELEASE", "dev")
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
S(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
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


class Load:
    def __init__(self, port: int, rate: float, limit: int = 20_000) -> None:
        self.port, self.rate, self.limit = port, rate, limit
        self.answers: list[tuple[float, float, int, str]] = []  # start, took, status, release
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        for _ in range(self.limit):
            if self.stop.is_set():
                return
            began = time.monotonic()
            status, release = 0, ""
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", "/", headers={"Host": HOST})
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
    app: Path, env: dict[str, str], port: int, name: str, rate: float, n: int
) -> dict[str, Any]:
    bad, slow = SCENARIOS[name]
    spec = app / "shipway.toml"
    text = SPEC.replace("@BAD@", bad).replace("@SLOW@", slow).replace("@N@", str(n))
    spec.write_text(text.replace("@STEP@", "5s"))
    load = Load(port, rate)
    load.thread.start()
    time.sleep(1.0)  # the stable's traffic first (a paced loop, not a wait on a condition)
    began = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "shipway", "-f", str(spec), "deploy", "local"],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    took = time.monotonic() - began
    time.sleep(1.0)
    load.stop.set()
    load.thread.join(timeout=30)
    canary = [a for a in load.answers if a[3] and a[3] != load.answers[0][3]]
    outcome = "rolled" if p.returncode == 0 else "rolled-back" if p.returncode == 10 else "?"
    out: dict[str, Any] = {
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="10,100")
    parser.add_argument("--scenarios", default="broken,partly,slow,good")
    parser.add_argument("--false-runs", type=int, default=1000)
    args = parser.parse_args()
    run = Run("canary", vars(args))
    figures: dict[str, Any] = {"scenarios": []}
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "app"
        app.mkdir()
        (app / "app.py").write_text(APP)
        port = free_port()
        env = {k: v for k, v in user_environ().items() if not k.startswith("SHIPWAY_")}
        env.update(SHIPWAY_STATE_DIR=str(Path(tmp) / "state"), SHIPWAY_ROUTER_PORT=str(port))
        (app / "shipway.toml").write_text(
            SPEC.replace("@BAD@", "0")
            .replace("@SLOW@", "0")
            .replace("@N@", "0")
            .replace("@STEP@", "5s")
        )
        first = subprocess.run(
            [sys.executable, "-m", "shipway", "-f", str(app / "shipway.toml"), "deploy", "local"],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert first.returncode == 0, first.stdout + first.stderr
        try:
            n = 0
            for rate in [float(r) for r in args.rates.split(",")]:
                for name in args.scenarios.split(","):
                    n += 1
                    figures["scenarios"].append(scenario(app, env, port, name, rate, n))
        finally:
            Supervisor(Path(tmp) / "state" / "supervisor").shutdown()
    figures["false_aborts"] = false_aborts(args.false_runs)
    print(f"  false aborts (simulated): {figures['false_aborts']}")
    run.finish(figures)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
