"""Benchmark of a request through the host's shared proxy against a request straight to the
app's container, over HTTP and HTTPS, on the test hosts of scripts/docker-testenv with the
test ACME CA (Pebble).

One app, slot on hosts [B, A] (B first: B orders the certificate, A gets it from B at each
full handshake, docs/docker.md *HTTPS*). In interleaved rounds, each round one request of
every kind, one after another (so no kind sees a different load):

  direct       GET to the container's own address and port on host A (its bridge network)
  http         through A's proxy, plain HTTP: the name of a second process of the same
               image, routed over plain HTTP alone, so it takes an entry of the proxy's
               pool (docs/docker.md, *Adding and removing without a reload*)
  https        through A's proxy over HTTPS, a kept-alive connection (no handshake)
  https-new    through A's proxy over HTTPS, a new connection: a full TLS handshake, which on
               A (not the issuer) fetches the certificate from B's proxy
  https-new-b  the same on B, the issuer (its certificate in its own cache)

Figures: median and p95 latency per kind (ms), and each one's median ratio to ``direct``
(per round). Each request is a new TCP connection except ``https`` (kept alive), so
``http`` against ``direct`` is the proxy's own hop.

Run (root, test hosts up):  .venv/bin/python bench/docker_proxy.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import ssl
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import Run, median, percentile  # noqa: E402
from tests.testenv.acme import challenge_port, ensure_acme_env  # noqa: E402
from tests.testenv.docker import ensure_docker_env  # noqa: E402

from shipway import api  # noqa: E402


class Quiet:
    def line(self, text: str) -> None:
        pass

    def progress(self, process: str, counts: object, note: str = "") -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def spec(name: str, image: str, proxy: str, hosts: list[str], http: int, tls: int,
         secure: str, plain: str, directory: str) -> str:  # fmt: skip
    return f"""
[app]
name = "{name}"
image = "{image}"
[processes.web]
port = 8080
healthcheck = {{ path = "/up", interval = "100ms", attempts = 100 }}
[[routes]]
host = "{secure}"
process = "web"
tls = "auto"
[processes.plain]
port = 8080
healthcheck = {{ path = "/up", interval = "100ms", attempts = 100 }}
[[routes]]
host = "{plain}"
process = "plain"
[slots.bench]
backend = "docker"
hosts = [{", ".join(f'"{h}"' for h in hosts)}]
proxy_image = "{proxy}"
proxy_port = {http}
proxy_tls_port = {tls}
drain_timeout = "1s"
acme = {{ directory = "{directory}", root = "ca.pem" }}
"""


def get(conn: http.client.HTTPConnection, host: str) -> None:
    conn.request("GET", "/version", headers={"Host": host})
    response = conn.getresponse()
    assert response.status == 200 and response.read() == b"v1\n", response.status


def once(address: str, port: int, host: str) -> None:
    conn = http.client.HTTPConnection(address, port, timeout=10)
    try:
        get(conn, host)
    finally:
        conn.close()


def secure_conn(address: str, port: int, name: str, root: str) -> http.client.HTTPConnection:
    context = ssl.create_default_context(cafile=root)
    tls = context.wrap_socket(
        socket.create_connection((address, port), timeout=10), server_hostname=name
    )
    conn = http.client.HTTPConnection(address, port, timeout=10)
    conn.sock = tls
    return conn


def secure_once(address: str, port: int, name: str, root: str) -> None:
    conn = secure_conn(address, port, name, root)
    try:
        get(conn, name)
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=300, help="requests of each kind")
    ap.add_argument("--json", type=Path, help="where the figures go")
    args = ap.parse_args()
    run = Run("docker_proxy", {k: str(v) for k, v in vars(args).items()})
    env, acme = ensure_docker_env(), ensure_acme_env()
    os.environ["SHIPWAY_SSH_CONFIG"] = str(env.ssh_home / ".ssh" / "config")
    os.environ["SHIPWAY_KNOWN_HOSTS"] = str(env.known_hosts)
    name = f"bench{uuid.uuid4().hex[:6]}"
    secure, plain = f"{name}.{acme.domain}", f"{name}-plain.test"
    work = Path(tempfile.mkdtemp(prefix="shipway-proxy-bench-"))
    (work / "ca.pem").write_bytes(acme.directory_ca.read_bytes() + acme.root.read_bytes())
    root, tls_port = str(acme.root), free_port()
    with challenge_port(acme) as http_port:
        (work / "shipway.toml").write_text(
            spec(name, env.images.v1, env.images.proxy, [env.b.url, env.a.url], http_port,
                 tls_port, secure, plain, acme.directory)
        )  # fmt: skip
        app = api.load(work / "shipway.toml")
        try:
            outcome = api.deploy(app, "bench", reporter=Quiet(), timeout=180)
            assert outcome.ok, outcome.line()
            client = env.local_client(env.a)
            (web,) = client.containers.list(
                filters={"label": [f"org.shipway.app={name}", "org.shipway.process=plain"]}
            )
            networks = web.attrs["NetworkSettings"]["Networks"]
            direct = next(iter(networks.values()))["IPAddress"]
            deadline = time.monotonic() + 90
            while True:  # the certificate ordered and served on both hosts
                try:
                    secure_once(env.a.address, tls_port, secure, root)
                    secure_once(env.b.address, tls_port, secure, root)
                    break
                except (ssl.SSLError, OSError):
                    assert time.monotonic() < deadline, "no certificate in 90 s"
                    time.sleep(0.5)
            kept = secure_conn(env.a.address, tls_port, secure, root)
            kinds: dict[str, Callable[[], None]] = {
                "direct": lambda: once(direct, 8080, plain),
                "http": lambda: once(env.a.address, http_port, plain),
                "https": lambda: get(kept, secure),
                "https-new": lambda: secure_once(env.a.address, tls_port, secure, root),
                "https-new-b": lambda: secure_once(env.b.address, tls_port, secure, root),
            }
            times: dict[str, list[float]] = {k: [] for k in kinds}
            for i in range(args.rounds):
                order = list(kinds) if i % 2 == 0 else list(reversed(kinds))
                for kind in order:
                    t0 = time.perf_counter()
                    kinds[kind]()
                    times[kind].append(time.perf_counter() - t0)
            kept.close()
        finally:
            api.destroy(app, "bench", confirm="bench", reporter=Quiet())
    figures = {
        kind: {
            "median_ms": round(median(v) * 1000, 3),
            "p95_ms": round(percentile(v, 95) * 1000, 3),
            "ratio_to_direct": round(
                median([t / d for t, d in zip(v, times["direct"], strict=True)]), 2
            ),
        }
        for kind, v in times.items()
    }
    for kind, f in figures.items():
        print(f"{kind:12} median {f['median_ms']:8.2f} ms  p95 {f['p95_ms']:8.2f} ms  "
              f"x{f['ratio_to_direct']} direct")  # fmt: skip
    run.finish({"figures": figures}, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
