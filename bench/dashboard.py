"""The dashboard's first view of 50 apps x 3 slots (docs/dashboard.md has the figures).

    python bench/dashboard.py [--apps 50] [--slots 3] [--rounds 5] [--no-browser]

It makes a local state directory of ``--apps`` apps with ``--slots`` local slots each, three
releases per slot. Deploying 150 slots for real would take most of an hour here, so the
records are written through the local backend's own record code (``write_records``, under
a clearance from the guard, each with the spec snapshot a deploy records): the dashboard
reads them exactly as it reads a deployed slot's (``shipway ls`` lists them, each slot
``stopped``: nothing of it runs). Then, per round, it starts ``shipway dashboard`` on that
directory and measures:

* ``read``: the server's own read of the overview (``read_ms`` of /api/overview), the first
  one (made as the server starts) and the next ones (the page's polls start them);
* ``first_view_http``: from the server answering to the page, its CSS and JS and
  /api/overview fetched by a plain HTTP client;
* ``first_view_browser``: headless Chromium (Debian's, through Selenium) opening the page,
  from navigation start until every slot's row is drawn (``performance.now()``), and of
  that the time its requests took, the page's and its four reads' (``browser_fetches``:
  the rest is the browser's own work).
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import Run, median, percentile, user_environ

from shipway.backends import open_backend
from shipway.guard import Guard
from shipway.release.model import Release, ReleaseStatus
from shipway.spec import parse

SLOT_NAMES = ("test1", "staging", "prod", "preview", "qa")


def make_state(root: Path, apps: int, slots: int) -> Path:
    """``apps`` x ``slots`` slots of records under ``root/state``, written by the local
    backend's record code."""
    state = root / "state"
    for i in range(apps):
        name = f"app{i:03d}"
        source = root / "src" / name
        source.mkdir(parents=True, exist_ok=True)
        text = f'[app]\nname = "{name}"\n[processes.web]\ncommand = "python3 app.py"\n'
        text += 'port = 8000\n[env]\nGREETING = "hello"\n'
        for slot in SLOT_NAMES[:slots]:
            text += f'[slots.{slot}]\nstate_dir = "{state}"\nguarded = false\n'
        app = parse(tomllib.loads(text), file="shipway.toml", base_dir=source)
        for slot in SLOT_NAMES[:slots]:
            target, view = app.slots.target(slot), app.in_slot(slot)
            snapshot = view.snapshot(app.slots.get(slot))
            backend = open_backend(app, app.slots.get(slot))
            try:
                records = [
                    Release(
                        app=name,
                        slot=slot,
                        revision=r,
                        status=ReleaseStatus.DEPLOYED if r == 3 else ReleaseStatus.SUPERSEDED,
                        image=f"local:{source}@sha256:{r:064x}",
                        spec=snapshot,
                        description=f"deploy r{r}",
                    )
                    for r in (1, 2, 3)
                ]
                backend.write_records(Guard(app.slots).clear(slot, slot), target, records)
            finally:
                backend.close()
    return state


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, (path, response.status, body[:200])
        return body
    finally:
        conn.close()


def start(state: Path) -> tuple[subprocess.Popen[str], int, float]:
    """``shipway dashboard`` on ``state``; the seconds it took to answer."""
    port = free_port()
    argv = [sys.executable, "-m", "shipway", "dashboard", "--state-dir", str(state)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [*argv, "--port", str(port)],
        env=user_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # printed once the first read is made and it listens
    assert "shipway dashboard: http" in line, line
    return proc, port, time.perf_counter() - t0


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


DRAWN = """
const [want, done] = arguments;
const fetched = () => {
  const [nav] = performance.getEntriesByType("navigation");
  const parts = performance.getEntriesByType("resource").map((r) => r.responseEnd - r.startTime);
  return nav.responseEnd - nav.startTime + parts.reduce((a, b) => a + b, 0);
};
const check = () => document.querySelectorAll("a.slot").length >= want
  ? done([performance.now(), fetched()]) : requestAnimationFrame(check);
check();
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=50)
    parser.add_argument("--slots", type=int, default=3, choices=range(1, len(SLOT_NAMES) + 1))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    run = Run("dashboard", vars(args) | {"json": str(args.json) if args.json else None})
    root = Path(tempfile.mkdtemp(prefix="shipway-bench-dashboard-"))
    want = args.apps * args.slots
    figures: dict[str, list[float]] = {
        "startup_s": [], "first_read_ms": [], "later_read_ms": [], "first_view_http_ms": [],
        "first_view_browser_ms": [], "browser_fetches_ms": [],
    }  # fmt: skip
    driver = None if args.no_browser else browser()
    try:
        t0 = time.perf_counter()
        state = make_state(root, args.apps, args.slots)
        print(f"made {want} slots of records in {time.perf_counter() - t0:.1f}s", flush=True)
        for n in range(args.rounds):
            proc, port, took = start(state)
            try:
                figures["startup_s"].append(took)
                if driver is not None:
                    driver.get(f"http://127.0.0.1:{port}/")
                    drawn, fetching = driver.execute_async_script(DRAWN, want)
                    figures["first_view_browser_ms"].append(float(drawn))
                    figures["browser_fetches_ms"].append(float(fetching))
                t1 = time.perf_counter()
                get(port, "/")
                get(port, "/static/dashboard.css")
                get(port, "/static/dashboard.js")
                doc = json.loads(get(port, "/api/overview"))
                figures["first_view_http_ms"].append((time.perf_counter() - t1) * 1000)
                figures["first_read_ms"].append(doc["read_ms"])
                slots = sum(len(a["slots"]) for a in doc["apps"])
                assert slots == want, f"{slots} slots on the overview, {want} made"
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:  # the polls start a read once it is stale
                    again = json.loads(get(port, "/api/overview"))
                    if again["read_at"] != doc["read_at"]:
                        figures["later_read_ms"].append(again["read_ms"])
                        break
                    time.sleep(0.2)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
                if proc.stdout:
                    proc.stdout.close()
            print(f"round {n + 1}: " + ", ".join(
                f"{k} {v[-1]:.1f}" for k, v in figures.items() if v), flush=True)  # fmt: skip
    finally:
        if driver is not None:
            driver.quit()
        shutil.rmtree(root, ignore_errors=True)
    summary = {
        k: {"median": round(median(v), 1), "p90": round(percentile(v, 90), 1), "n": len(v)}
        for k, v in figures.items()
        if v
    }
    for key, value in summary.items():
        print(f"{key}: median {value['median']}, p90 {value['p90']} ({value['n']} rounds)")
    run.finish({"slots": want, "figures": summary}, args.json)


if __name__ == "__main__":
    main()
