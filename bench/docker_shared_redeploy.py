"""Benchmark of redeploying one app while another app on the same host's shared proxy is
under load, against the same redeploys of one app alone behind a per-slot proxy of its own
(the proxy shipway made before the shared one), on test host A of scripts/docker-testenv.

Three apps, each with one route by host name, all on host A:
  shared-a  redeployed N times (v1 <-> v2), on the host's shared proxy (this code)
  shared-b  never redeployed, on the same shared proxy (port) as shared-a
  per-slot  redeployed N times, alone on a proxy of its own (another port)

The code of today has no per-slot proxy any more (a per-slot proxy of before is moved over to
the shared one by the next deploy), so ``per-slot`` is deployed and redeployed by shipway as
it was before the shared proxy: the commit given by ``--old`` (default c934c17), checked out
into a git worktree outside the repository (``--old-tree``, made when missing) and run with its
own ``PYTHONPATH``. Both kinds of redeploy run the same way: in a worker process of their own
(one per code), timed in it around ``api.deploy``, in interleaved rounds (each round one
redeploy of each, the order alternating), under the same load.

Load: a bounded loop of requests against each app's host name through its proxy (a new TCP
connection per request, as users' clients make; ``--clients`` threads per app, a pause of
``--pace`` s after each, at most ``--bound`` requests each), all the while. Every request that
is not a 200 with a release's body is kept: its status or exception, when it started, and how
far that is from the nearest switch (the route step, in which the proxy reloads), and the
proxies' own log lines around it.

Figures: failed requests of shared-a, shared-b and per-slot (goal 0 each); the redeploy time of
shared-a and of per-slot (median, min-max) and the median of the rounds' ratios.

Run (root, test hosts up):  .venv/bin/python bench/docker_shared_redeploy.py [--redeploys 5]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import Run, Threads, median  # noqa: E402
from docker_proxy import free_port  # noqa: E402
from tests.testenv.docker import DockerEnv, ensure_docker_env  # noqa: E402

SLOT = "bench"
BODIES = ("v1\n", "v2\n")
#: how far from a failed request the proxies' log lines are shown with it (s)
LOG_NEAR = 1.0

#: the worker: one process per code, which deploys (or destroys) as told on stdin, one JSON
#: job a line, and answers with the time the deploy took in it and its lines' wall times
WORKER = r"""
import json, sys, time
import shipway
from shipway import api

class Lines:
    def __init__(self): self.lines = []
    def line(self, text): self.lines.append((time.time(), text))
    def progress(self, process, counts, note=""): pass

print(json.dumps({"code": shipway.__file__}), flush=True)
for raw in sys.stdin:
    job, out = json.loads(raw), Lines()
    app = api.load(job["spec"])
    start, t0 = time.time(), time.monotonic()
    try:
        if job["op"] == "destroy":
            api.destroy(app, job["slot"], confirm=job["slot"], reporter=out)
            ok, said = True, "destroyed"
        else:
            outcome = api.deploy(app, job["slot"], image=job["image"], reporter=out, timeout=180)
            ok, said = outcome.ok, outcome.line()
    except Exception as exc:
        ok, said = False, f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - t0
    print(json.dumps({"seconds": took, "start": start, "ok": ok, "line": said,
                      "lines": out.lines}), flush=True)
"""


class Worker:
    """A process that runs shipway's ``api`` from ``src`` (this repository's or the old one's)."""

    def __init__(self, src: Path, cwd: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env, cwd=cwd,
        )  # fmt: skip
        self.code = str(self._answer()["code"])
        assert self.code.startswith(str(src)), f"the worker runs {self.code}, not {src}"

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker ended (exit {self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, op: str, spec: Path, image: str = "") -> dict[str, Any]:
        assert self.proc.stdin is not None
        job = {"op": op, "spec": str(spec), "slot": SLOT, "image": image}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@dataclass
class App:
    label: str
    name: str
    port: int
    spec: Path
    worker: Worker
    host: str = ""
    times: list[float] = field(default_factory=list)
    redeploys: list[dict[str, Any]] = field(default_factory=list)


def write_spec(env: DockerEnv, work: Path, app: App) -> None:
    app.host = f"{app.name}.test"
    directory = work / app.name
    directory.mkdir()
    app.spec = directory / "shipway.toml"
    app.spec.write_text(f"""
[app]
name = "{app.name}"
image = "{env.images.v1}"
[processes.web]
port = 8080
healthcheck = {{ path = "/up", interval = "100ms", attempts = 100 }}
[[routes]]
host = "{app.host}"
process = "web"
[slots.{SLOT}]
backend = "docker"
hosts = ["{env.a.url}"]
proxy_image = "{env.images.proxy}"
proxy_port = {app.port}
drain_timeout = "1s"
""")


class Load(Threads):
    """A loop of requests per app (a new connection each), bounded, keeping every failure."""

    def __init__(self, address: str, apps: list[App], clients: int, pace: float, bound: int):
        super().__init__()
        self.address, self.pace, self.bound = address, pace, bound
        self.ok: dict[str, int] = {a.label: 0 for a in apps}
        self.failed: dict[str, list[dict[str, Any]]] = {a.label: [] for a in apps}
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self.loop, args=(a,), daemon=True)
            for a in apps
            for _ in range(clients)
        ]

    def once(self, app: App) -> tuple[int, str]:
        conn = http.client.HTTPConnection(self.address, app.port, timeout=10)
        try:
            conn.request("GET", "/version", headers={"Host": app.host})
            response = conn.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            conn.close()

    def loop(self, app: App) -> None:
        sent = 0
        while not self.stop.is_set() and sent < self.bound:
            sent += 1
            start, t0 = time.time(), time.monotonic()
            try:
                status, body = self.once(app)
                answer = f"{status} {body.strip()[:100]}"
                good = status == 200 and body in BODIES
            except OSError as exc:  # http.client's errors are OSErrors or HTTPException
                answer, good = f"{type(exc).__name__}: {exc}"[:160], False
            except http.client.HTTPException as exc:
                answer, good = f"{type(exc).__name__}: {exc}"[:160], False
            with self.lock:
                if good:
                    self.ok[app.label] += 1
                else:
                    took = round(time.monotonic() - t0, 3)
                    self.failed[app.label].append({"start": start, "s": took, "answer": answer})
            time.sleep(self.pace)


def old_tree(commit: str, where: Path) -> Path:
    """The old code's ``src``: a worktree of ``commit`` at ``where`` (made when missing)."""
    if not (where / "src" / "shipway").is_dir():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where),
                        commit], check=True)  # fmt: skip
    return where / "src"


def switches(apps: list[App]) -> list[tuple[float, float, str]]:
    """Each redeploy's switch: from the start of its route step (the walk's "[i/n] update
    route/..." line) to the start of the next step (or the redeploy's end); the proxy's
    reload happens in between."""
    out = []
    for a in apps:
        for i, r in enumerate(a.redeploys):
            lines = r["lines"] + [[r["start"] + r["seconds"], "(end)"]]
            for (at, text), (until, _) in itertools.pairwise(lines):
                if "route/" in text:
                    out.append((at, until, f"{a.label} #{i + 1} {text.split('] ')[-1]}"))
    return sorted(out)


def placed(
    failures: list[dict[str, Any]],
    windows: list[tuple[float, float, str]],
    log: list[tuple[float, str]],
) -> list[str]:
    """Each failure with the nearest switch: in it, or seconds before or after it."""
    out = []
    for f in failures:
        t = f["start"]
        near = min(windows, key=lambda w: 0 if w[0] <= t <= w[1] else min(abs(t - w[0]),
                   abs(t - w[1])), default=None)  # fmt: skip
        if near is None:
            where = "no switch"
        elif near[0] <= t <= near[1]:
            where = f"during {near[2]} ({t - near[0]:.3f}s into its {near[1] - near[0]:.3f}s)"
        else:
            gap = t - near[1] if t > near[1] else t - near[0]
            where = f"{gap:+.3f}s from {near[2]}"
        nearby = [f"{at - t:+.3f}s {text}" for at, text in log if abs(at - t) <= LOG_NEAR]
        out.append(f"{f['answer']} (took {f['s']}s; started {where}); the proxies' log "
                   f"within {LOG_NEAR}s: {nearby}")  # fmt: skip
    return out


def proxy_log(env: DockerEnv, names: list[str]) -> list[tuple[float, str]]:
    """The proxies' own log lines (Caddy's JSON: its time and message), to place failures."""
    client = env.local_client(env.a)
    out = []
    try:
        for name in names:
            try:
                raw = client.containers.get(name).logs().decode(errors="replace")
            except docker.errors.NotFound:
                continue
            for line in raw.splitlines():
                try:
                    entry = json.loads(line)
                    out.append((float(entry["ts"]), f"{name}: {entry.get('msg', '')}"))
                except (ValueError, KeyError, TypeError):
                    continue
    finally:
        client.close()
    return sorted(out)


def cleanup(env: DockerEnv, apps: list[App]) -> None:
    """What the apps left on host A when a destroy did not run (a failed run)."""
    client = env.local_client(env.a)
    try:
        for a in apps:
            label = {"label": [f"org.shipway.app={a.name}"]}
            for c in client.containers.list(all=True, filters=label):
                c.remove(force=True)
            for v in client.volumes.list(filters=label):
                v.remove(force=True)
    finally:
        client.close()


def parser(doc: str | None, old: str, what: str) -> argparse.ArgumentParser:
    """The options a bench of this code against an ``old`` commit's takes (with ``what``
    the old commit is), beside its own."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    ap.add_argument("--pace", type=float, default=0.005, help="pause after each request (s)")
    ap.add_argument("--bound", type=int, default=100_000, help="most requests per thread")
    ap.add_argument("--old", default=old, help=f"the commit of {what}")
    ap.add_argument("--old-tree", type=Path, default=Path(f"/tmp/shipway-{old}"),
                    help="its worktree (outside the repository; made when missing)")  # fmt: skip
    ap.add_argument("--json", type=Path, help="where the figures go")
    return ap


def workers(args: argparse.Namespace, prefix: str) -> tuple[DockerEnv, Path, Worker, Worker]:
    """The test hosts (their SSH settings exported), a work directory, and a worker of this
    code and one of the old commit's."""
    env = ensure_docker_env()
    os.environ["SHIPWAY_SSH_CONFIG"] = str(env.ssh_home / ".ssh" / "config")
    os.environ["SHIPWAY_KNOWN_HOSTS"] = str(env.known_hosts)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    return env, work, Worker(REPO / "src", work), Worker(old_tree(args.old, args.old_tree), work)


def main() -> int:
    ap = parser(__doc__, "c934c17", "the per-slot proxy")
    ap.add_argument("--redeploys", type=int, default=5, help="rounds (one redeploy of each)")
    ap.add_argument("--clients", type=int, default=1, help="request threads per app")
    args = ap.parse_args()
    run = Run("docker_shared_redeploy", {k: str(v) for k, v in vars(args).items()})
    env, work, new, old = workers(args, "shipway-shared-redeploy-")
    tag = uuid.uuid4().hex[:6]
    shared_port, own_port = free_port(), free_port()
    a = App("shared-a", f"sa{tag}", shared_port, work, new)
    b = App("shared-b", f"sb{tag}", shared_port, work, new)
    c = App("per-slot", f"ps{tag}", own_port, work, old)
    apps = [a, b, c]
    for app in apps:
        write_spec(env, work, app)
    try:
        for app in apps:
            first = app.worker.run("deploy", app.spec, env.images.v1)
            assert first["ok"], f"{app.label}: {first['line']}"
        with Load(env.a.address, apps, args.clients, args.pace, args.bound) as load:
            for i in range(args.redeploys):
                image = env.images.v2 if i % 2 == 0 else env.images.v1
                for app in (a, c) if i % 2 == 0 else (c, a):
                    done = app.worker.run("deploy", app.spec, image)
                    assert done["ok"], f"{app.label}: {done['line']}"
                    app.times.append(done["seconds"])
                    app.redeploys.append(done)
                print(f"round {i + 1}/{args.redeploys}: shared-a {a.times[-1]:.2f}s, per-slot "
                      f"{c.times[-1]:.2f}s; failed so far "
                      f"{ {k: len(v) for k, v in load.failed.items()} }",
                      file=sys.stderr)  # fmt: skip
    finally:
        log = proxy_log(env, [f"shipway-proxy-{shared_port}", f"shipway-{c.name}-{SLOT}-proxy"])
        for app in apps:
            with_destroy = app.worker.run("destroy", app.spec)
            if not with_destroy["ok"]:
                print(f"{app.label}: {with_destroy['line']}", file=sys.stderr)
        new.close()
        old.close()
        cleanup(env, apps)
    windows = switches([a, c])
    ratios = [s / p for s, p in zip(a.times, c.times, strict=True)]
    figures = {
        "code": {"shared": new.code, "per_slot": old.code, "per_slot_commit": args.old},
        "redeploys": args.redeploys,
        "requests_ok": load.ok,
        "requests_failed": {k: len(v) for k, v in load.failed.items()},
        "failures": {k: placed(v, windows, log) for k, v in load.failed.items() if v},
        "redeploy_s": {
            app.label: {
                "median": round(median(app.times), 2),
                "min_max": [round(min(app.times), 2), round(max(app.times), 2)],
                "all": [round(t, 2) for t in app.times],
            }
            for app in (a, c)
        },
        "ratio_shared_to_per_slot": round(median(ratios), 2),
    }
    run.finish(figures, args.json)
    for app in (a, c):
        f = figures["redeploy_s"][app.label]
        print(f"{app.label} redeploy: median {f['median']}s (min {f['min_max'][0]}, max "
              f"{f['min_max'][1]})")  # fmt: skip
    print(f"ratio_shared_to_per_slot (median of rounds): {figures['ratio_shared_to_per_slot']}")
    print(f"requests_ok: {figures['requests_ok']}")
    print(f"requests_failed: {figures['requests_failed']}")
    for label, lines in figures["failures"].items():
        for line in lines:
            print(f"  {label}: {line}")
    return 0 if not any(figures["requests_failed"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
