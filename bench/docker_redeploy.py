"""Benchmark of the Docker hosts backend on the test hosts of scripts/docker-testenv
(A: local socket, B: over SSH), or on more engines (``bench/many_hosts.sh``).

Measures, in interleaved rounds (each round: one shipway redeploy and one SDK floor, in an
order that alternates), under a request loop against every host's proxy:
  1. failed requests during the redeploys (v1 <-> v2 on every host; goal 0);
  2. deploy time: shipway's redeploy (lock, records, observe, health gates, switch, drain,
     removal of the old containers) against the Docker SDK floor: the same containers
     created and started with the SDK directly, one host after the other (the floor this
     benchmark always had), until each answers HTTP; and the same floor with every host at
     once (threads), and with the script's connections made first (SSH handshake, API
     version — as every shipway deploy, a process of its own, makes its own), printed beside;
     and the whole redeploy done with the SDK: connecting first, the new containers started
     until each answers, the previous ones stopped and removed. The ratio is the median of
     the rounds' ratios. The drain (``drain_timeout`` 1 s here: the longest it may take; it
     ends when no connection to the old container is left) is part of shipway's time;
  3. Engine API calls per redeploy, per kind of host (local socket, SSH), and per route.

Run (root, test hosts up):  .venv/bin/python bench/docker_redeploy.py [--redeploys 10]
    [--hosts-file FILE]   # more hosts (one URL a line), e.g. from bench/many_hosts.sh
    [--batch N]           # the slot's batch size
    [--dial-stdio]        # host B by its bare URL (a dial-stdio per connection), not its socket
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import requests  # noqa: E402
from benchlib import Run, Threads, median  # noqa: E402
from tests.testenv.docker import DockerEnv, ensure_docker_env  # noqa: E402

from shipway import api  # noqa: E402

DRAIN = 1.0


class Timeline:
    """A reporter that prints nothing and keeps each line with its time from the start."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.lines: list[tuple[float, str]] = []

    def line(self, text: str) -> None:
        self.lines.append((time.monotonic() - self.start, text))

    def progress(self, process: str, counts: Any, note: str = "") -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


class Calls:
    """Every Engine API call this process makes (docker-py's requests), while counting."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.timed: list[tuple[float, float, str]] = []  # start, seconds, call
        self.on = False
        real = requests.Session.send

        def send(session: requests.Session, request: Any, **kw: Any) -> Any:
            if self.on:
                url = str(request.url)
                transport = "ssh" if "://ssh" in url else "socket"
                path = re.sub(r"/v1\.\d+", "", str(request.path_url).split("?")[0])
                path = re.sub(r"/(containers|exec|images|networks|volumes)/[^/]+", r"/\1/ID", path)
                key = f"{transport} {request.method} {path}"
                self.counts[key] += 1
                t0 = time.monotonic()
                try:
                    return real(session, request, **kw)
                finally:
                    self.timed.append((t0, time.monotonic() - t0, key))
            return real(session, request, **kw)

        requests.Session.send = send  # type: ignore[method-assign]

    def take(self) -> Counter[str]:
        out, self.counts = self.counts, Counter()
        return out

    def take_timed(self) -> list[tuple[float, float, str]]:
        out, self.timed = self.timed, []
        return out


def spec(env: DockerEnv, name: str, port: int, hosts: list[str], batch: int | None) -> str:
    listed = ", ".join(f'"{h}"' for h in hosts)
    return f"""
[app]
name = "{name}"
image = "{env.images.v1}"

[processes.web]
port = 8080
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 100

[slots.bench]
backend = "docker"
hosts = [{listed}]
proxy_image = "{env.images.proxy}"
proxy_port = {port}
drain_timeout = "{DRAIN}s"
{f"batch = {batch}" if batch else ""}
"""


class Load(Threads):
    def __init__(self, urls: list[str], per_url: int, limit: float) -> None:
        super().__init__()
        self.ok: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.deadline = time.monotonic() + limit
        self.threads = [
            threading.Thread(target=self.loop, args=(u,), daemon=True)
            for u in urls
            for _ in range(per_url)
        ]

    def loop(self, url: str) -> None:
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    self.ok[resp.read().decode().strip()] += 1
            except (urllib.error.URLError, OSError) as exc:
                self.failed[f"{type(exc).__name__}: {exc}"[:120]] += 1
            time.sleep(0.005)


def _start_one(client: Any, name: str, image: str) -> Any:
    c = client.containers.create(
        image, name=f"{name}-direct-{uuid.uuid4().hex[:6]}", environment=["PORT=8080"]
    )
    c.start()
    deadline = time.monotonic() + 60
    while True:
        c.reload()
        ip = next(iter(c.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
        r = c.exec_run(["wget", "-q", "-O", "-", f"http://{ip}:8080/up"])
        if r.exit_code == 0 or time.monotonic() > deadline:
            return c
        time.sleep(0.05)


def direct_start(clients: list[Any], name: str, image: str, parallel: bool) -> float:
    """The same work without shipway: create + start one container per host with the SDK
    (over SSH where the host is), wait until each answers GET /up, then remove them; one
    host after the other, or (``parallel``) every host at once."""
    started = time.monotonic()
    containers: list[Any] = []
    try:
        if parallel:
            with ThreadPoolExecutor(max_workers=len(clients)) as pool:
                futures = [pool.submit(_start_one, c, name, image) for c in clients]
                containers = [f.result() for f in futures]
        else:
            containers = [_start_one(c, name, image) for c in clients]
        return time.monotonic() - started
    finally:
        for c in containers:
            c.remove(force=True)


def direct_redeploy(
    hosts: list[str], name: str, image: str, previous: list[str]
) -> tuple[float, list[str]]:
    """The whole redeploy without shipway, as a script run per deploy would do it: its
    connections made (SSH handshake, API version), the new containers started one host
    after the other until each answers GET /up, then the previous ones (``previous``: an id
    per host) stopped and removed. Returns the time and the new containers' ids."""
    t0 = time.monotonic()
    fresh, conns = sdk_clients(hosts)
    try:
        for c in fresh:
            c.ping()
        new = [_start_one(c, name, image) for c in fresh]
        for client, old in zip(fresh, previous, strict=True):
            client.api.stop(old, timeout=10)
            client.api.remove_container(old)
        return time.monotonic() - t0, [c.id for c in new]
    finally:
        for conn in conns:
            conn.close()


def cleanup(clients: list[Any], name: str, port: int) -> None:
    """Remove everything the benchmark's app left on every host (records included), and
    the shared proxy on its port (no other app uses that port: the bench chose it free),
    which is on the app's network until it goes."""
    label = {"label": [f"org.shipway.app={name}"]}
    proxy = f"shipway-proxy-{port}"
    for client in clients:
        for c in client.containers.list(all=True, filters={"name": proxy}):
            c.remove(force=True)
        for v in client.volumes.list(filters={"name": proxy}):
            v.remove(force=True)
        for c in client.containers.list(all=True, filters=label):
            c.remove(force=True)
        for v in client.volumes.list(filters=label):
            v.remove(force=True)
        for n in client.networks.list(filters=label):
            n.remove()


def sdk_clients(urls: list[str]) -> tuple[list[Any], list[Any]]:
    """An SDK client per host, and the connections that hold them. Over SSH docker-py alone
    opens a channel (and a ``docker system dial-stdio``) for every new URL, which made
    this floor 3-6x slower than the SDK can be; so the floor's clients get the same one
    pool of channels as shipway's (:class:`HostConnection`) — it is still the SDK's own
    client, used well."""
    from shipway.backends.docker.connection import HostConnection
    from shipway.backends.docker.machines import addresses
    from shipway.spec.model import DockerHost

    conns = [HostConnection(a) for a in addresses([DockerHost(url=u) for u in urls])]
    return [c.client() for c in conns], conns


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--redeploys", type=int, default=10, help="rounds (one redeploy each)")
    ap.add_argument("--clients", type=int, default=2, help="client threads per host")
    ap.add_argument("--hosts-file", type=Path, help="more hosts, one URL a line")
    ap.add_argument("--batch", type=int, help="the slot's batch size")
    ap.add_argument("--only-more", action="store_true", help="the hosts file's hosts only")
    ap.add_argument("--json", type=Path, help="where the figures go")
    ap.add_argument("--calls", action="store_true", help="print the median redeploy's API calls")
    ap.add_argument(
        "--dial-stdio", action="store_true",
        help="reach host B by its URL without a socket path (each API connection runs "
        "`docker system dial-stdio` on it) instead of through its engine's socket",
    )  # fmt: skip
    args = ap.parse_args()
    name_of_run = "docker_redeploy" if not args.hosts_file else "docker_many_hosts"
    run = Run(name_of_run, {k: str(v) for k, v in vars(args).items()})

    env = ensure_docker_env()
    more = args.hosts_file.read_text().split() if args.hosts_file else []
    if more:  # their SSH config and known_hosts come with the hosts file
        os.environ["SHIPWAY_SSH_CONFIG"] = str(args.hosts_file.with_name("ssh_config"))
        os.environ["SHIPWAY_KNOWN_HOSTS"] = str(args.hosts_file.with_name("known_hosts"))
    else:
        os.environ["SHIPWAY_SSH_CONFIG"] = str(env.ssh_home / ".ssh" / "config")
        os.environ["SHIPWAY_KNOWN_HOSTS"] = str(env.known_hosts)
    b = env.b if args.dial_stdio else env.b.forwarded()
    hosts = more if args.only_more else [env.a.url, b.url, *more]
    name = f"bench{uuid.uuid4().hex[:6]}"
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="shipway-docker-bench-"))
    (work / "shipway.toml").write_text(spec(env, name, port, hosts, args.batch))
    app = api.load(work / "shipway.toml")
    addresses = [h.split("@")[-1].split("/")[0].split(":")[0] if h.startswith("ssh://")
                 else "127.0.0.1" for h in hosts]  # fmt: skip
    urls = [f"http://{a}:{port}/version" for a in addresses]
    calls = Calls()
    clients, connections = sdk_clients(hosts)
    times: list[float] = []
    floors: list[float] = []
    parallel_floors: list[float] = []
    connecting_floors: list[float] = []
    redeploy_floors: list[float] = []
    floor_running: list[str] = []  # the redeploy floor's containers, an id per host
    per_redeploy: list[Counter[str]] = []
    timelines: list[tuple[list[tuple[float, str]], list[tuple[float, float, str]]]] = []
    try:
        # the floor starts both images by tag: have them on every host (untimed; on a new
        # machine only host A has them until a deploy pulls them)
        with ThreadPoolExecutor(max_workers=min(len(clients), 8)) as pool:
            list(pool.map(lambda c: [c.images.pull(i) for i in (env.images.v1, env.images.v2)],
                          clients))  # fmt: skip
        floor_running = [_start_one(c, name, env.images.v1).id for c in clients]
        t0 = time.monotonic()
        first = api.deploy(app, "bench", reporter=Timeline())
        cold = time.monotonic() - t0
        assert first.ok, first.line()
        with Load(urls, args.clients, limit=120 + 60 * args.redeploys) as load:
            for i in range(args.redeploys):
                image = env.images.v2 if i % 2 == 0 else env.images.v1

                def redeploy(image: str = image) -> None:
                    calls.on = True
                    t0 = time.monotonic()
                    timeline = Timeline()
                    outcome = api.deploy(app, "bench", image=image, reporter=timeline)
                    times.append(time.monotonic() - t0)
                    calls.on = False
                    per_redeploy.append(calls.take())
                    timelines.append(
                        (timeline.lines, [(s - t0, d, k) for s, d, k in calls.take_timed()])
                    )
                    assert outcome.ok, outcome.line()

                def floor(image: str = image) -> None:
                    floors.append(direct_start(clients, name, env.images.v2, parallel=False))
                    # as a script run per deploy would: its connections (SSH handshake,
                    # API version) made first, as every shipway deploy makes its own
                    t0 = time.monotonic()
                    fresh, fresh_conns = sdk_clients(hosts)
                    try:
                        for c in fresh:
                            c.ping()
                        took = time.monotonic() - t0
                        took += direct_start(fresh, name, env.images.v2, parallel=False)
                    finally:
                        for conn in fresh_conns:
                            conn.close()
                    connecting_floors.append(took)
                    took, floor_running[:] = direct_redeploy(hosts, name, image, floor_running)
                    redeploy_floors.append(took)

                for work_item in (redeploy, floor) if i % 2 == 0 else (floor, redeploy):
                    work_item()
                parallel_floors.append(direct_start(clients, name, env.images.v2, parallel=True))
                print(
                    f"round {i + 1}/{args.redeploys}: shipway {times[-1]:.2f}s, SDK floor "
                    f"{floors[-1]:.2f}s (hosts at once {parallel_floors[-1]:.2f}s, connecting "
                    f"first {connecting_floors[-1]:.2f}s; a whole redeploy "
                    f"{redeploy_floors[-1]:.2f}s), "
                    f"{sum(per_redeploy[-1].values())} API calls",
                    file=sys.stderr,
                )
    finally:
        for client, cid in zip(clients, floor_running, strict=False):
            client.api.remove_container(cid, force=True)
        cleanup(clients, name, port)
        for conn in connections:
            conn.close()
    ratios = [t / f for t, f in zip(times, floors, strict=True)]
    ratios_redeploy = [t / f for t, f in zip(times, redeploy_floors, strict=True)]
    ratios_parallel = [t / f for t, f in zip(times, parallel_floors, strict=True)]
    ratios_connecting = [t / f for t, f in zip(times, connecting_floors, strict=True)]
    kinds: dict[str, list[int]] = {"socket": [], "ssh": [], "all": []}
    for counted in per_redeploy:
        kinds["socket"].append(sum(v for k, v in counted.items() if k.startswith("socket ")))
        kinds["ssh"].append(sum(v for k, v in counted.items() if k.startswith("ssh ")))
        kinds["all"].append(sum(counted.values()))
    routes: Counter[str] = Counter()
    for counted in per_redeploy:
        routes.update(counted)
    figures = {
        "hosts": len(hosts),
        "batch": args.batch,
        "redeploys": args.redeploys,
        "requests_ok": sum(load.ok.values()),
        "requests_failed": sum(load.failed.values()),
        "failures": dict(load.failed.most_common(5)),
        "cold_first_deploy_s": round(cold, 2),
        "redeploy_median_s": round(median(times), 2),
        "redeploy_min_max_s": [round(min(times), 2), round(max(times), 2)],
        "drain_s": DRAIN,
        "sdk_floor_median_s": round(median(floors), 2),
        "sdk_floor_hosts_at_once_median_s": round(median(parallel_floors), 2),
        "ratio_to_sdk_floor": round(median(ratios), 2),
        "ratio_to_sdk_floor_hosts_at_once": round(median(ratios_parallel), 2),
        "sdk_floor_connecting_first_median_s": round(median(connecting_floors), 2),
        "ratio_to_sdk_floor_connecting_first": round(median(ratios_connecting), 2),
        "sdk_redeploy_floor_median_s": round(median(redeploy_floors), 2),
        "ratio_to_sdk_redeploy_floor": round(median(ratios_redeploy), 2),
        "api_calls_per_redeploy_median": {k: median(v) for k, v in kinds.items()},
        "api_calls_per_redeploy_by_route": {
            k: round(v / len(per_redeploy), 1) for k, v in routes.most_common()
        },
    }
    middle = sorted(range(len(times)), key=lambda i: times[i])[len(times) // 2]
    lines, timed = timelines[middle]
    print(f"where the median redeploy's time goes ({times[middle]:.2f}s; seconds from its start):")
    for at, text in lines:
        print(f"  {at:6.2f}  {text[:110]}")
    if args.calls:
        print("its Engine API calls (start, seconds, call):")
        for at, took, key in sorted(timed):
            print(f"  {at:6.2f} {took:5.2f}  {key}")
    run.finish(figures, args.json)
    for key in ("redeploy_median_s", "sdk_floor_median_s", "sdk_floor_hosts_at_once_median_s",
                "ratio_to_sdk_floor", "ratio_to_sdk_floor_hosts_at_once",
                "sdk_floor_connecting_first_median_s", "ratio_to_sdk_floor_connecting_first",
                "sdk_redeploy_floor_median_s", "ratio_to_sdk_redeploy_floor",
                "api_calls_per_redeploy_median",
                "requests_ok", "requests_failed"):  # fmt: skip
        print(f"{key}: {figures[key]}")
    return 0 if figures["requests_failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
