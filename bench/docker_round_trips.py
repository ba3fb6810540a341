"""Docker Engine API round trips per shipway operation, on the test hosts of
scripts/docker-testenv (A: local socket, B: over SSH).

A small app (one web process, routed by one host name) on both hosts goes through: a first
deploy (v1), a redeploy (v2), ``status``, a rollback (to v1), a stop and a destroy. For
each operation it prints the Engine API calls this process made (every request docker-py
sends passes through ``requests``' ``Session.send``, counted there by method and endpoint
pattern, ids replaced by ``{id}``), and beside them the calls that cost the engine most:
archive calls (``PUT``/``GET`` ``/containers/{id}/archive``: dockerd re-executes itself for
each), container creates and starts. The lock's renewal thread is counted too (its calls
are real round trips). Real engines, nothing mocked. A stop, a destroy and a deploy that
routes a host name look at every proxy on their hosts, other apps' too: their count is
printed first.

Before/after on one machine: ``git archive OLD src | tar -x -C /tmp/old``, then the same
command with ``--src /tmp/old/src``.

Run (root, test hosts up):  .venv/bin/python bench/docker_round_trips.py [--rounds 1]
    [--src DIR]       # shipway's sources from DIR (e.g. an older commit's), not this tree's
    [--by-endpoint]   # every operation's calls by method + endpoint, not only the totals
    [--json PATH]     # the figures as JSON
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# --src DIR: shipway's sources from DIR (an older commit's, to compare), before its import
_SRC = sys.argv[sys.argv.index("--src") + 1] if "--src" in sys.argv[:-1] else str(REPO / "src")
sys.path.insert(0, _SRC)
from shipway import api  # noqa: E402  (before docker_redeploy, which puts this tree's src first)

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import requests  # noqa: E402
from docker_redeploy import cleanup as redeploy_cleanup  # noqa: E402
from docker_redeploy import free_port  # noqa: E402
from docker_redeploy import spec as redeploy_spec  # noqa: E402
from tests.testenv.docker import DockerEnv, ensure_docker_env  # noqa: E402

SLOT = "bench"  # docker_redeploy's spec's slot
ROUTE = '\n[[routes]]\nhost = "{host}"\nprocess = "web"\n'
OPERATIONS = ("first deploy", "redeploy", "status", "rollback", "stop", "destroy")
#: a name or id in an endpoint's path (an image's name may hold slashes: up to its last part)
_IMAGE = re.compile(
    r"^/(images|distribution)/(?!create$|json$|load$|prune$|search$)(.+)/(json|push|tag|history)$"
)
_ID = re.compile(r"^/(containers|exec|networks|volumes)/(?!create$|json$|prune$)[^/]+")
_VERSION = re.compile(r"^/v1\.\d+")


class Quiet:
    """A reporter that keeps its lines (printed only when an operation fails)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)

    def progress(self, process: str, counts: Any, note: str = "") -> None:
        pass


class Calls:
    """Every Engine API request this process sends while ``on``, by method + endpoint."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        #: every counted request in order: (thread, host, method + endpoint)
        self.order: list[tuple[str, str, str]] = []
        self.on = False
        real = requests.Session.send

        def send(session: requests.Session, request: Any, **kw: Any) -> Any:
            if self.on:
                path = _VERSION.sub("", str(request.path_url).split("?")[0])
                path = _IMAGE.sub(lambda m: f"/{m.group(1)}/{{name}}/{m.group(3)}", path)
                path = _ID.sub(lambda m: f"/{m.group(1)}/{{id}}", path)
                key = f"{request.method} {path}"
                self.counts[key] += 1
                host = "ssh" if "://ssh" in str(request.url) else "socket"
                self.order.append((threading.current_thread().name, host, key))
            return real(session, request, **kw)

        requests.Session.send = send  # type: ignore[method-assign,assignment]

    def during(self, work: Callable[[], Any]) -> tuple[Counter[str], list[tuple[str, str, str]]]:
        self.counts, self.order = Counter(), []
        self.on = True
        try:
            work()
        finally:
            self.on = False
        return self.counts, self.order


def kinds(counted: Counter[str]) -> dict[str, int]:
    """The totals a row prints: all calls, archive calls, container creates and starts."""
    return {
        "calls": sum(counted.values()),
        "archive": sum(n for k, n in counted.items() if k.endswith("/containers/{id}/archive")),
        "creates": counted["POST /containers/create"],
        "starts": counted["POST /containers/{id}/start"],
        "execs": counted["POST /containers/{id}/exec"],
    }


def spec(env: DockerEnv, name: str, port: int) -> str:
    """docker_redeploy's app on hosts A and B, its web process routed by one host name."""
    hosts = [env.a.url, env.b.url]
    return redeploy_spec(env, name, port, hosts, None) + ROUTE.format(host=f"{name}.test")


def cleanup(env: DockerEnv, name: str, port: int) -> None:
    """Remove what the bench's app left on both hosts (records too) and the shared proxy
    of its own port (chosen free: no other app uses it)."""
    clients = [env.local_client(host) for host in env.hosts]
    try:
        redeploy_cleanup(clients, name, port)
    finally:
        for client in clients:
            client.close()


Round = dict[str, tuple[Counter[str], list[tuple[str, str, str]]]]


def one_round(env: DockerEnv, calls: Calls) -> Round:
    name = f"rt{uuid.uuid4().hex[:6]}"
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="shipway-round-trips-"))
    (work / "shipway.toml").write_text(spec(env, name, port))
    app = api.load(work / "shipway.toml")

    def deploy(image: str) -> Callable[[], None]:
        def run() -> None:
            reporter = Quiet()
            outcome = api.deploy(app, SLOT, image=image, reporter=reporter, timeout=120)
            assert outcome.ok, outcome.line() + "\n" + "\n".join(reporter.lines)

        return run

    def rollback() -> None:
        reporter = Quiet()
        outcome = api.rollback(app, SLOT, reporter=reporter, timeout=120)
        assert outcome.ok, outcome.line() + "\n" + "\n".join(reporter.lines)

    def status() -> None:
        seen = api.status(app, SLOT)
        assert seen.deployed is not None and seen.deployed.revision == 2, seen

    steps: dict[str, Callable[[], None]] = {
        "first deploy": deploy(env.images.v1),
        "redeploy": deploy(env.images.v2),
        "status": status,
        "rollback": rollback,
        "stop": lambda: api.stop(app, SLOT, reporter=Quiet()),
        "destroy": lambda: api.destroy(app, SLOT, confirm=SLOT, reporter=Quiet()),
    }
    try:
        return {op: calls.during(steps[op]) for op in OPERATIONS}
    finally:
        cleanup(env, name, port)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=1, help="rounds (each a new app)")
    ap.add_argument("--by-endpoint", action="store_true", help="each operation's calls listed")
    ap.add_argument("--json", type=Path, help="where the figures go")
    ap.add_argument("--trace", choices=OPERATIONS, help="one operation's calls in order")
    ap.add_argument("--src", help="shipway's sources from this directory (read at import)")
    args = ap.parse_args()
    env = ensure_docker_env()
    os.environ["SHIPWAY_SSH_CONFIG"] = str(env.ssh_home / ".ssh" / "config")
    os.environ["SHIPWAY_KNOWN_HOSTS"] = str(env.known_hosts)
    # a stop (and a destroy) looks at every shared proxy on its hosts, other apps' too
    for host in env.hosts:
        client = env.local_client(host)
        try:
            shared = client.containers.list(
                all=True, filters={"label": ["org.shipway.proxy.port"]}, sparse=True
            )
        finally:
            client.close()
        print(f"host {host.name}: {len(shared)} shared proxies of other apps and tests")
    print(f"shipway from {Path(api.__file__).parent}")
    calls = Calls()
    rounds = [one_round(env, calls) for _ in range(args.rounds)]
    # the median round by total calls (the counts barely vary: retries, a lock renewal)
    rounds.sort(key=lambda r: sum(sum(c.values()) for c, _ in r.values()))
    picked = {op: counted for op, (counted, _) in rounds[len(rounds) // 2].items()}
    if args.trace:
        print(f"{args.trace}, its calls in order (thread, host, call):")
        for thread, where, key in rounds[len(rounds) // 2][args.trace][1]:
            print(f"  {thread[:24]:<24} {where:<7} {key}")
    if args.by_endpoint:
        for op in OPERATIONS:
            print(f"{op}:")
            for key, n in sorted(picked[op].items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"  {n:4d}  {key}")
    head = f"{'operation':<14}{'calls':>7}{'archive':>9}{'creates':>9}{'starts':>8}{'execs':>7}"
    print(head)
    total: Counter[str] = Counter()
    for op in OPERATIONS:
        row = kinds(picked[op])
        total.update(row)
        print(f"{op:<14}" + "".join(f"{row[k]:>{w}}" for k, w in _WIDTHS))
    print(f"{'total':<14}" + "".join(f"{total[k]:>{w}}" for k, w in _WIDTHS))
    if args.json:
        doc = {
            "rounds": args.rounds,
            "operations": {
                op: {**kinds(picked[op]), "by_endpoint": dict(picked[op])} for op in OPERATIONS
            },
            "total": dict(total),
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


_WIDTHS = (("calls", 7), ("archive", 9), ("creates", 9), ("starts", 8), ("execs", 7))

if __name__ == "__main__":
    sys.exit(main())
