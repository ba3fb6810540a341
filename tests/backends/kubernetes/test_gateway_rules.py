"""The canary's HTTPRoute (its tester's header, cookie and weighted rules), what a
GatewayClass says about backendRef filters, and the counts summed over every routed
process's Services — without a cluster: the bodies are pure, and the counts are read from
a small HTTP server answering Prometheus' query API."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from shipway.backends.kubernetes import gateway as gw

IDENT = "shop.prod.r7"


def split_route(percent: int = 10) -> dict[str, Any]:
    return gw.route_body(
        "shop", "prod", "apps", "shop.example", "gateways/web", "shop-web", 8080,
        ("shop-web-canary", IDENT, percent),
    )  # fmt: skip


def test_the_route_sends_a_cookie_holder_to_its_side_and_sets_it_on_a_first_answer() -> None:
    rules = split_route()["spec"]["rules"]
    # the tester's header first (it wins over a cookie), then the cookies, then the split
    matched = [(r["matches"][0]["headers"][0], r["backendRefs"][0]["name"]) for r in rules[:4]]
    assert [(h["name"], h.get("type", "Exact"), to) for h, to in matched] == [
        (gw.HEADER, "Exact", "shop-web-canary"),
        (gw.HEADER, "Exact", "shop-web"),
        ("Cookie", "RegularExpression", "shop-web-canary"),
        ("Cookie", "RegularExpression", "shop-web"),
    ]
    split = rules[-1]["backendRefs"]
    assert [(r["name"], r["weight"]) for r in split] == [("shop-web", 90), ("shop-web-canary", 10)]
    added = [r["filters"][0]["responseHeaderModifier"]["add"] for r in split]
    assert added == [
        [{"name": "Set-Cookie", "value": f"shipway-canary={IDENT}.{side}; Path=/; HttpOnly; "
                                         "SameSite=Lax"}]
        for side in ("stable", "canary")
    ]  # fmt: skip


def test_an_implementation_without_backend_filters_gets_none() -> None:
    body = gw.route_body(
        "shop", "prod", "apps", "shop.example", "gateways/web", "shop-web", 8080,
        ("shop-web-canary", IDENT, 10), set_cookies=False,
    )  # fmt: skip
    rules = body["spec"]["rules"]
    assert rules[:4] == split_route()["spec"]["rules"][:4]  # a cookie holder keeps its side
    assert [sorted(r) for r in rules[-1]["backendRefs"]] == [["name", "port", "weight"]] * 2


def test_no_canary_no_cookie_rule() -> None:
    body = gw.route_body("shop", "prod", "apps", "h", "gateways/web", "shop-web", 8080, None)
    assert body["spec"]["rules"] == [{"backendRefs": [{"name": "shop-web", "port": 8080,
                                                       "weight": 100}]}]  # fmt: skip


@pytest.mark.parametrize(
    ("header", "side"),
    [
        (f"shipway-canary={IDENT}.canary", "canary"),
        (f"a=1; shipway-canary={IDENT}.stable; b=2", "stable"),
        (f"a=1;shipway-canary={IDENT}.canary", "canary"),
        (f"shipway-canary={IDENT}.canary ", "canary"),
        # an earlier canary's, another app's, a longer name, a value that goes on: no side
        ("shipway-canary=shop.prod.r6.canary", None),
        ("shipway-canary=shopxprod.r7.canary", None),
        (f"xshipway-canary={IDENT}.canary", None),
        (f"shipway-canary={IDENT}.canary2", None),
        ("a=1", None),
    ],
)
def test_the_cookie_rule_matches_the_whole_header(header: str, side: str | None) -> None:
    # the Gateway API leaves the flavour to the implementation: written so that a full
    # match (Envoy's RE2) and a search (Traefik's Go regexp) agree
    found = [s for s in ("canary", "stable") if re.fullmatch(gw.cookie_match(IDENT, s), header)]
    searched = [s for s in ("canary", "stable") if re.search(gw.cookie_match(IDENT, s), header)]
    assert found == searched == ([side] if side else [])


@pytest.mark.parametrize(
    ("features", "keeps"),
    [
        ([], False),
        (["HTTPRoute", gw.RESPONSE_HEADERS], False),  # Traefik v3.6.12's
        (["HTTPRoute", gw.RESPONSE_HEADERS, gw.BACKEND_FILTERS], True),
    ],
)
def test_a_gateway_class_says_whether_a_first_answer_sets_the_cookie(
    features: list[str], keeps: bool
) -> None:
    cls = {"status": {"supportedFeatures": [{"name": f} for f in features]}}
    assert gw.keeps_clients(cls) is keeps
    assert gw.keeps_clients({}) is False


@pytest.fixture
def prometheus() -> Iterator[tuple[str, list[str]]]:
    """A Prometheus query API answering each query with the samples of every Service named
    in it: 10 requests (2 of them 500) and 10 in the 1 ms bucket per Service."""
    asked: list[str] = []

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            promql = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
            asked.append(promql)
            names = re.search(r'service=~"([^"]*)"', promql)
            result: list[dict[str, Any]] = []
            for name in names.group(1).split("|") if names else []:
                if "requests_total" in promql:
                    result += [{"metric": {"service": name, "code": "200"}, "value": [0, "8"]},
                               {"metric": {"service": name, "code": "500"}, "value": [0, "2"]}]
                else:
                    result += [{"metric": {"service": name, "le": le}, "value": [0, "10"]}
                               for le in ("0.001", "+Inf")]  # fmt: skip
            doc = json.dumps({"status": "success", "data": {"result": result}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(doc)))
            self.end_headers()
            self.wfile.write(doc)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_each_side_sums_the_services_of_every_routed_process(
    prometheus: tuple[str, list[str]],
) -> None:
    url, asked = prometheus
    services = {
        "stable": {gw.traefik_service("apps", s, 8080) for s in ("shop-web", "shop-api")},
        "canary": {gw.traefik_service("apps", "shop-web-canary", 8080),
                   gw.traefik_service("apps", "shop-api-canary", 8080)},
    }  # fmt: skip
    sides = gw.tallies(url, services)
    for side in ("stable", "canary"):
        assert (sides[side].requests, sides[side].status_5xx) == (20, 4)
        assert sum(sides[side].latency) == 20 and sides[side].latency[0] == 20
    assert all("shop-api-canary" in q and "shop-web" in q for q in asked), asked
