"""The dashboard's live view: how late an event reaches a page, what an open page costs the
server, and what an operation's file weighs (docs/dashboard.md has the figures).

    python bench/dashboard_live.py [--events 200] [--rate 10] [--pages 1,5] [--idle 20]

In a temporary state directory it starts ``shipway dashboard`` (a process of its own) and:

* ``delivery``: writes ``--events`` events at ``--rate`` a second into an operation's file,
  through the command line's own sink (``LiveFile``), while one client reads
  ``/api/live``; each event's delay is from just before its write to its message being read
  (the server reads the files every 0.2 s: the delay is mostly that wait);
* ``idle_cpu``: the server's CPU time (``/proc/PID/stat``, user + system) over ``--idle``
  seconds with each count of ``--pages`` streams open and nothing happening, as a share of
  one core;
* ``deploy_file``: a real local deploy of ``examples/hello`` through the command line: the
  size of its file and its count of events.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from benchlib import Run, cpu_seconds, median, percentile, user_environ
from dashboard import free_port

from shipway.events.live import LiveFile, op_files
from shipway.events.model import Said, Started
from shipway.release.audit import Audit

REPO = Path(__file__).resolve().parents[1]


def start_dashboard(env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    argv = [sys.executable, "-m", "shipway", "dashboard", "--port", str(port)]
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # its address: it listens
    return proc, port


def open_stream(port: int) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/api/live")
    response = conn.getresponse()
    assert response.status == 200
    return response


def messages(response: http.client.HTTPResponse) -> Any:
    """Each message's data, as it is read (None for a comment or a ``reset``)."""
    kind = ""
    while True:
        line = response.fp.readline().decode()
        if not line:
            return
        if line.startswith("event: "):
            kind = line[7:].strip()
        elif line.startswith("data: "):
            yield None if kind else json.loads(line[6:])
            kind = ""


def delivery(port: int, live: Path, events: int, rate: float) -> dict[str, float]:
    response = open_stream(port)
    read_at: dict[str, float] = {}
    done = threading.Event()

    def reader() -> None:
        for doc in messages(response):
            if doc and doc["event"]["event"] == "said":
                read_at[doc["event"]["text"]] = time.monotonic()
                if len(read_at) == events:
                    done.set()
                    return

    threading.Thread(target=reader, daemon=True).start()
    time.sleep(1)  # the stream's first read is made
    sink = LiveFile(live)
    sink.emit(Started("deploy", "bench", "live", "local", Audit("bench", "box")))
    written: dict[str, float] = {}
    for i in range(events):
        text = f"event {i}"
        written[text] = time.monotonic()
        sink.emit(Said(text))
        time.sleep(1 / rate)
    done.wait(30)
    delays = [(read_at[t] - written[t]) * 1000 for t in written if t in read_at]
    return {
        "events": events,
        "received": len(delays),
        "median_ms": round(median(delays), 1),
        "p90_ms": round(percentile(delays, 90), 1),
        "max_ms": round(max(delays), 1),
    }


def idle_cpu(proc: subprocess.Popen[str], port: int, pages: int, seconds: float) -> float:
    streams = [open_stream(port) for _ in range(pages)]
    time.sleep(1)
    before = cpu_seconds(proc.pid)
    time.sleep(seconds)
    used = cpu_seconds(proc.pid) - before
    for s in streams:
        s.close()
    return round(100 * used / seconds, 2)


def deploy_file(env: dict[str, str], tmp: Path, state: Path) -> dict[str, Any]:
    app = tmp / "hello"
    shutil.copytree(REPO / "examples" / "hello", app, ignore=shutil.ignore_patterns("__pycache__"))
    argv = [sys.executable, "-m", "shipway", "deploy", "local"]
    r = subprocess.run(argv, env=env, cwd=app, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    (f,) = [f for f in op_files(state / "_events") if f.app == "hello"]
    lines = f.path.read_text().splitlines()
    kinds: dict[str, int] = {}
    for line in lines:
        kind = json.loads(line)["event"]
        kinds[kind] = kinds.get(kind, 0) + 1
    return {"bytes": f.path.stat().st_size, "events": len(lines), "by_kind": kinds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--pages", default="1,5")
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    run = Run("dashboard_live", vars(args) | {"json": str(args.json)})
    tmp = Path(tempfile.mkdtemp(prefix="shipway-live-"))
    state = tmp / "state"
    env = user_environ()
    env = {k: v for k, v in env.items() if not k.startswith(("SHIPWAY_", "XDG_STATE"))}
    env.update(SHIPWAY_STATE_DIR=str(state), SHIPWAY_ROUTER_PORT=str(free_port()))
    os.environ["SHIPWAY_STATE_DIR"] = str(state)
    proc, port = start_dashboard(env, tmp)
    figures: dict[str, Any] = {}
    try:
        figures["delivery"] = delivery(port, state / "_events", args.events, args.rate)
        print("delivery:", figures["delivery"], flush=True)
        figures["idle_cpu_percent"] = {}
        for pages in (int(p) for p in args.pages.split(",")):
            share = idle_cpu(proc, port, pages, args.idle)
            figures["idle_cpu_percent"][str(pages)] = share
            print(f"idle: {pages} page(s) open: {share}% of a core", flush=True)
        figures["deploy_file"] = deploy_file(env, tmp, state)
        print("deploy file:", figures["deploy_file"], flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
        from shipway.backends.local.supervisor import Supervisor

        Supervisor(state / "supervisor").shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    run.finish(figures, args.json)


if __name__ == "__main__":
    main()
