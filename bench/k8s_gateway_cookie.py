"""What the test plane's Gateway does with the canary's cookie rules (docs/canary.md,
*Stickiness on Kubernetes*): the HTTPRoute shipway applies during a canary, on two sides
that are not pods but two HTTP servers on this host answering ``stable`` and ``canary``.

In a scratch namespace (deleted at the end): two selector-less Services whose
EndpointSlices point at the two servers (on ``--address``, the real node's bridge, which
the Gateway's implementation reaches as it reaches pods), and one HTTPRoute on the
testenv's Gateway made by shipway's own ``route_body`` — the tester's header, the cookie
rules, and the weighted split whose backendRefs carry the ``Set-Cookie`` filters (as where
the GatewayClass declares a backendRef's filters). For each canary weight, once the
Gateway took the route (``Accepted`` and ``ResolvedRefs``) and its rules run (each weight
is a new canary id: 20 requests in a row with its canary's cookie reach the canary, 20 with
its stable's the stable — Traefik's smooth weighted round robin never gives one side 20 in
a row at the earlier weights): ``--requests`` requests without a cookie (who answered, and
how many answers set a cookie), with the stable's cookie among two others, with the
canary's, and with an earlier canary's.

Run:  eval "$(scripts/k8s-testenv env)"
      KUBECONFIG=$SHIPWAY_TEST_KUBECONFIG .venv/bin/python bench/k8s_gateway_cookie.py \\
          [--weights 10,50,90] [--requests 40] [--address 10.245.0.1]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from shipway.backends.kubernetes import gateway as gw

NAMESPACE = "shipway-bench-cookie"
HOST = "cookie.bench.test"
IDENT = "bench.cookie.r{}"  # one canary per weight: its cookie rule tells when it runs
MANAGER = "shipway-bench"


@contextmanager
def sides(address: str) -> Iterator[dict[str, int]]:
    """Two HTTP servers answering their side's name: side -> port."""
    servers = {}
    for side in ("stable", "canary"):

        class Answer(BaseHTTPRequestHandler):
            said = side.encode()

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(self.said)))
                self.end_headers()
                self.wfile.write(self.said)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer((address, 0), Answer)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[side] = server
    try:
        yield {side: s.server_address[1] for side, s in servers.items()}
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def backends(client: Client, address: str, ports: dict[str, int]) -> None:
    client.apply(from_dict({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": NAMESPACE}}), field_manager=MANAGER)  # fmt: skip
    for side, port in ports.items():
        client.apply(from_dict({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": side, "namespace": NAMESPACE},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]},
        }), field_manager=MANAGER)  # fmt: skip
        client.apply(from_dict({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": side, "namespace": NAMESPACE,
                         "labels": {"kubernetes.io/service-name": side}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        }), field_manager=MANAGER)  # fmt: skip


def ask(url: str, cookie: str | None = None) -> tuple[str, bool]:
    """(the side that answered, whether the answer set a cookie)."""
    headers = {"Host": HOST}
    if cookie:
        headers["Cookie"] = cookie
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as got:
        return got.read().decode(), bool(got.headers.get_all("Set-Cookie"))


def runs(url: str, canary: str, stable: str) -> bool:
    """Whether the route's cookie rules for these cookies run: 20 answers in a row each."""
    try:
        return all(ask(url, canary)[0] == "canary" for _ in range(20)) and all(
            ask(url, stable)[0] == "stable" for _ in range(20)
        )
    except OSError:  # a 404 until the router has the route
        return False


def wait(what: str, check: Any, timeout: float = 60) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started


CASES = ("no cookie", "the stable's cookie", "the canary's cookie", "an earlier canary's")


def split(client: Client, gateway: str, url: str, weight: int, n: int, revision: int) -> None:
    ident = IDENT.format(revision)
    body = gw.route_body("bench", "cookie", NAMESPACE, HOST, gateway, "stable", 80,
                         ("canary", ident, weight))  # fmt: skip
    client.patch(gw.HTTPRoute, body["metadata"]["name"], body, namespace=NAMESPACE,
                 patch_type=PatchType.APPLY, field_manager=MANAGER, force=True)  # fmt: skip
    said: list[str] = []

    def taken() -> bool:
        route = client.get(gw.HTTPRoute, body["metadata"]["name"], namespace=NAMESPACE)
        ok, why = gw.route_state(route.to_dict(), gateway)
        said[:] = [why]
        return ok and (route.metadata.annotations or {}).get(gw.PERCENT) == str(weight)

    wait("the route's status", taken)
    stable, canary = (f"{gw.COOKIE}={gw.cookie_value(ident, s)}" for s in ("stable", "canary"))
    # Traefik writes the status before its routers run the route (its providers' throttle):
    # the new canary's cookie reaching it says they do, weights included
    lag = wait("the rules to run", lambda: runs(url, canary, stable))
    earlier = f"{gw.COOKIE}={gw.cookie_value(IDENT.format(revision - 1), 'canary')}"
    cookies = (None, f"a=1; {stable}; b=2", canary, earlier)
    cells = []
    for cookie in cookies:
        answers = [ask(url, cookie) for _ in range(n)]
        seen = Counter(side for side, _ in answers)
        cells.append(f"{seen['stable']} stable, {seen['canary']} canary, "
                     f"{sum(1 for _, set_ in answers if set_)} set a cookie")  # fmt: skip
    print(f"| {weight} | " + " | ".join(cells) + f" | {lag:.2f} s |  ({said[0]})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", default="10,50,90")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--address", default="10.245.0.1")
    args = parser.parse_args()
    gateway = os.environ.get("SHIPWAY_TEST_GATEWAY", "shipway-gateway/web")
    url = os.environ.get("SHIPWAY_TEST_GATEWAY_URL", "http://127.0.0.1:18080") + "/"
    client = Client()
    try:
        with sides(args.address) as ports:
            backends(client, args.address, ports)
            print("| canary weight | " + " | ".join(CASES) + " | rules ran after the status |")
            for revision, weight in enumerate((int(w) for w in args.weights.split(",")), 2):
                split(client, gateway, url, weight, args.requests, revision)
    finally:
        client.delete(Namespace, NAMESPACE)


if __name__ == "__main__":
    main()
