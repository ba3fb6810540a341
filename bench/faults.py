"""Deploys under injected transient faults: success rate and time to outcome per fault rate.

For each backend, shipway reaches its engine through the test suite's fault proxy
(tests/testenv/faults.py), which breaks a share of ALL calls — 0% (the fault-free run),
5% and 10% by default — with faults drawn from a seeded generator: 503, 500, 429 with
Retry-After, connections reset before and after the engine acted, and on Kubernetes also
502, 504, 409 on patches, watches cut mid-stream and 410 Gone events. Each trial deploys a
good release (v1 and v2 alternately); after it, the engine is read directly (never through
the proxy) to judge the outcome:

* ``rolled`` counts as a success only if the new release is what serves;
* a wrong outcome is ``rolled`` while the new release does not serve, ``rolled-back``
  while the previous one does not, or ``rollback-failed`` while the previous one does;
* any other exit (an error, exit 1) is counted as such.

Backends: ``docker`` (host A of scripts/docker-testenv, behind the proxy's unix socket),
``kubernetes`` (the test control plane, behind the TLS-terminating proxy) and ``local``
(examples/hello; the proxy sits in front of its supervisord's XML-RPC socket once the
fault-free first deploy started the daemon — the router and the processes themselves are
not faulted: they are the app, not an engine API).

Run (root, both test environments up):

    eval "$(scripts/docker-testenv env)"; eval "$(scripts/k8s-testenv env)"
    .venv/bin/python bench/faults.py [--trials 10] [--rates 0,0.05,0.1] \\
        [--backends docker,kubernetes,local] [--out faults.json]

Prints one table per backend against its fault-free run and writes every trial as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from tests.testenv.faults import FaultProxy, docker_proxy, kubernetes_proxy  # noqa: E402

from shipway import api  # noqa: E402
from shipway.errors import ShipwayError  # noqa: E402


class Quiet:
    def __init__(self) -> None:
        self.retries = 0

    def line(self, text: str) -> None:
        if text.startswith("retrying "):
            self.retries += 1

    def progress(self, process: str, counts: Any, note: str = "") -> None:
        pass


@dataclass
class Trial:
    backend: str
    rate: float
    seed: int
    outcome: str
    exit_code: int
    seconds: float
    faults: int
    retries: int
    serving: str
    wrong: bool


@dataclass
class Slot:
    """One benchmark slot: how to deploy a version (an image, a greeting), and what serves."""

    name: str
    deploy: Callable[[str], tuple[int, str, Quiet]]
    serving: Callable[[], str]
    proxy: FaultProxy


def _deploy(
    app_file: Path, slot: str, image: str | None, backend: Any = None
) -> tuple[int, str, Quiet]:
    reporter = Quiet()
    try:
        app = api.load(app_file)
        outcome = api.deploy(app, slot, image=image, reporter=reporter, backend=backend)
    except ShipwayError as exc:
        return exc.exit_code, f"error (exit {exc.exit_code})", reporter
    return outcome.exit_code, outcome.kind, reporter


@contextmanager
def docker_slot(work: Path) -> Iterator[tuple[Slot, dict[str, str]]]:
    from tests.testenv.docker import ensure_docker_env

    env = ensure_docker_env()
    proxy, url = docker_proxy(env.a.socket, work / "proxy", "faulty-a")
    name = f"bench{uuid.uuid4().hex[:6]}"
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        port = int(s.getsockname()[1])
    spec = work / "shipway.toml"
    spec.write_text(
        f"""
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
hosts = ["{url}"]
proxy_image = "{env.images.proxy}"
proxy_port = {port}
drain_timeout = "0.5s"
"""
    )

    def serving() -> str:
        try:
            with urllib.request.urlopen(f"http://{env.a.address}:{port}/version", timeout=5) as r:
                return r.read().decode().strip()
        except (urllib.error.URLError, OSError) as exc:
            return f"nothing ({type(exc).__name__})"

    versions = {env.images.v1: "v1", env.images.v2: "v2"}
    try:
        yield Slot("docker", lambda image: _deploy(spec, "bench", image), serving, proxy), versions
    finally:
        proxy.stop()
        label = {"label": [f"org.shipway.app={name}"]}
        client = env.local_client(env.a)
        try:
            for c in client.containers.list(all=True, filters=label):
                c.remove(force=True)
            for v in client.volumes.list(filters=label):
                v.remove(force=True)
            for n in client.networks.list(filters=label):
                n.remove()
        finally:
            client.close()


@contextmanager
def kubernetes_slot(work: Path) -> Iterator[tuple[Slot, dict[str, str]]]:
    from bench.k8s_common import admin, kubeconfig, namespace
    from lightkube.resources.apps_v1 import Deployment

    admin_config = kubeconfig()
    client = admin()
    proxy, through = kubernetes_proxy(admin_config, work / "proxy")
    os.environ["KUBECONFIG"] = str(through)
    with namespace(client, "faults") as ns:
        spec = work / "shipway.toml"
        spec.write_text(
            f"""
[app]
name = "bench"
image = "registry.example/bench:1"
image_type = "dockerfile"

[processes.web]
command = "serve"
port = 8000
replicas = 2

[slots.bench]
backend = "kubernetes"
namespace = "{ns}"
"""
        )

        def serving() -> str:
            web = client.get(Deployment, "bench-web", namespace=ns)
            image = web.spec.template.spec.containers[0].image
            ready = (web.status.availableReplicas or 0) if web.status else 0
            return f"{image.rsplit(':', 1)[-1]} ({ready}/2 available)" if ready == 2 else (
                f"not ready ({ready}/2 of {image})"
            )

        versions = {"registry.example/bench:1": "1 (2/2 available)"}
        versions["registry.example/bench:2"] = "2 (2/2 available)"
        try:
            deploy = lambda image: _deploy(spec, "bench", image)  # noqa: E731
            yield Slot("kubernetes", deploy, serving, proxy), versions
        finally:
            proxy.stop()
            os.environ["KUBECONFIG"] = str(admin_config)


@contextmanager
def local_slot(work: Path) -> Iterator[tuple[Slot, dict[str, str]]]:
    import http.client
    import shutil

    from shipway.backends.local import connect
    from shipway.backends.local.supervisor import Supervisor

    app_dir = work / "hello"
    shutil.copytree(REPO / "examples" / "hello", app_dir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    os.environ.update(SHIPWAY_STATE_DIR=str(work / "state"), SHIPWAY_ROUTER_PORT=str(port))
    spec = app_dir / "shipway.toml"
    greeting = {"now": "hello"}

    def deploy(version: str) -> tuple[int, str, Quiet]:
        was = f'GREETING = "{greeting["now"]}"'
        spec.write_text(spec.read_text().replace(was, f'GREETING = "{version}"'))
        greeting["now"] = version
        app = api.load(spec)
        backend = connect(app, app.slots.get("local"))
        if proxy is not None:  # after the first deploy: supervisord runs, reached through it
            backend.supervisor.sock = proxy_sock
        return _deploy(spec, "local", None, backend)

    def serving() -> str:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", "/", headers={"Host": "hello.localhost"})
            return conn.getresponse().read().decode().split(" ", 1)[0]
        except (OSError, http.client.HTTPException) as exc:
            return f"nothing ({type(exc).__name__})"
        finally:
            conn.close()

    proxy: FaultProxy | None = None
    first = deploy("hello")
    if first[0] != 0:
        raise SystemExit(f"local: the first deploy failed: {first[1]}")
    real = Supervisor(work / "state" / "supervisor")
    proxy, url = docker_proxy(f"unix://{real.sock}", work / "proxy", "supervisor")
    proxy_sock = Path(url.removeprefix("unix://"))
    try:
        yield Slot("local", deploy, serving, proxy), {"hello": "hello", "hi": "hi"}
    finally:
        proxy.stop()
        real.shutdown()


def run(slot: Slot, versions: dict[str, str], rates: list[float], trials: int) -> list[Trial]:
    images = list(versions)
    out: list[Trial] = []
    code, kind, _ = slot.deploy(images[0])  # the starting release, fault-free
    if code != 0:
        raise SystemExit(f"{slot.name}: the first deploy failed: {kind}")
    current = images[0]
    for r, rate in enumerate(rates):
        for i in range(trials):
            image = images[1] if current == images[0] else images[0]  # always a change
            seed = 1000 * r + i
            slot.proxy.reset_log()
            if rate:
                slot.proxy.randomly(rate, seed)
            started = time.monotonic()
            code, kind, reporter = slot.deploy(image)
            took = time.monotonic() - started
            faults = len(slot.proxy.faults())
            slot.proxy.clear()
            serving = slot.serving()
            wrong = (
                (kind == "rolled" and serving != versions[image])
                or (kind == "rolled-back" and serving != versions[current])
                or (kind == "rollback-failed" and serving == versions[current])
            )
            if kind == "rolled":
                current = image
            out.append(
                Trial(
                    backend=slot.name,
                    rate=rate,
                    seed=seed,
                    outcome=kind,
                    exit_code=code,
                    seconds=took,
                    faults=faults,
                    retries=reporter.retries,
                    serving=serving,
                    wrong=wrong,
                )
            )
            print(
                f"{slot.name} {rate:.0%} trial {i + 1}/{trials}: {kind} in {took:.1f}s "
                f"({faults} faults, {reporter.retries} retries)",
                file=sys.stderr,
            )
    return out


def table(trials: list[Trial], backend: str, rates: list[float]) -> list[str]:
    rows = [
        f"{backend}: deploys under injected transient faults (all calls)",
        f"  {'faults':>6}  {'rolled':>9}  {'median':>7}  {'p90':>6}  {'vs 0%':>6}  "
        f"{'faults/deploy':>13}  {'wrong':>5}  other outcomes",
    ]
    base: float | None = None
    for rate in rates:
        mine = [t for t in trials if t.backend == backend and t.rate == rate]
        if not mine:
            continue
        rolled = sum(t.outcome == "rolled" and not t.wrong for t in mine)
        times = sorted(t.seconds for t in mine)
        median = statistics.median(times)
        p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
        base = median if base is None else base
        others = Counter(t.outcome for t in mine if t.outcome != "rolled")
        rows.append(
            f"  {rate:>6.0%}  {rolled:>4}/{len(mine):<4}  {median:>6.1f}s  {p90:>5.1f}s  "
            f"{median / base:>5.2f}x  {statistics.mean(t.faults for t in mine):>13.1f}  "
            f"{sum(t.wrong for t in mine):>5}  "
            + (", ".join(f"{k} x{n}" for k, n in sorted(others.items())) or "-")
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trials", type=int, default=10, help="deploys per backend and rate")
    ap.add_argument("--rates", default="0,0.05,0.1")
    ap.add_argument("--backends", default="docker,kubernetes,local")
    ap.add_argument("--out", type=Path, default=Path("faults.json"))
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    slots = {"docker": docker_slot, "kubernetes": kubernetes_slot, "local": local_slot}
    trials: list[Trial] = []
    for backend in backends:
        with slots[backend](Path(tempfile.mkdtemp(prefix=f"shipway-faults-{backend}-"))) as (
            slot,
            versions,
        ):
            trials += run(slot, versions, rates, args.trials)
    for backend in backends:
        print("\n".join(table(trials, backend, rates)))
    doc = {
        "rates": rates,
        "trials_per_rate": args.trials,
        "load_average": os.getloadavg()[0],
        "trials": [asdict(t) for t in trials],
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    wrong = sum(t.wrong for t in trials)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
