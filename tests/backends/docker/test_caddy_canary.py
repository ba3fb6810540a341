"""The Caddy config of a canary (pure): weights that give the canary its share, the split
route (tester's header, sticky cookie, weighted fallback), its access log, and a route with
a canary observed as drifted. Caddy itself runs them in test_canary.py."""

from __future__ import annotations

import pytest

from shipway.backends.docker import caddy, caddy_canary

BODY = {"hosts": ["shop.test"], "upstreams": ["s-1:80", "s-2:80"]}
CANARY = {"id": "shop.prod.r2", "upstreams": ["c-1:80"], "weight": 10, "secret": "k"}


@pytest.mark.parametrize(
    ("stable", "canary", "percent"), [(1, 1, 10), (2, 1, 10), (3, 2, 50), (1, 3, 25), (2, 2, 99)]
)
def test_the_weights_give_the_canary_its_share(stable: int, canary: int, percent: int) -> None:
    w = caddy_canary.weights(stable, canary, percent)
    assert len(w) == stable + canary and all(x > 0 for x in w)
    assert sum(w[stable:]) * 100 == percent * sum(w)


def test_a_route_with_a_canary_splits_by_header_cookie_and_weight() -> None:
    config = caddy.compose({"shop/prod route/web@a": {"body": BODY, "canary": CANARY}}, {}, "x")
    server = config["apps"]["http"]["servers"]["shipway"]
    route = server["routes"][0]
    assert route["match"] == [{"host": ["shop.test"]}]
    handlers = [h["handler"] for h in route["handle"]]
    assert handlers == ["vars", "log_append", "log_append", "log_append", "subroute"]
    always, never, split = route["handle"][-1]["routes"]
    assert always["match"] == [{"header": {"X-Shipway-Canary": ["always"]}}]
    assert [u["dial"] for u in always["handle"][0]["upstreams"]] == ["c-1:80"]
    assert [u["dial"] for u in never["handle"][0]["upstreams"]] == ["s-1:80", "s-2:80"]
    proxy = split["handle"][0]
    assert [u["dial"] for u in proxy["upstreams"]] == ["s-1:80", "s-2:80", "c-1:80"]
    policy = proxy["load_balancing"]["selection_policy"]
    assert policy["policy"] == "cookie" and policy["name"] == "shipway-canary"
    assert policy["fallback"] == {"policy": "weighted_round_robin", "weights": [9, 9, 2]}
    assert "try_duration" not in proxy["load_balancing"]  # no retry on the other release
    # only the canary's requests are logged, to stdout
    assert server["logs"] == {} and config["logging"] == caddy_canary.LOGGING


def test_a_canary_s_answer_timeout_ends_a_hanging_answer_on_every_side_of_the_route() -> None:
    def timeouts(canary: dict[str, object]) -> set[object]:
        config = caddy.compose({"shop/prod route/web@a": {"body": BODY, "canary": canary}}, {}, "x")
        sides = config["apps"]["http"]["servers"]["shipway"]["routes"][0]["handle"][-1]["routes"]
        return {s["handle"][0]["transport"]["response_header_timeout"] for s in sides}

    assert timeouts(CANARY) == {30 * 10**9}  # the spec's default
    assert timeouts({**CANARY, "answer_timeout": 1.5}) == {1_500_000_000}
    plain = caddy.compose({"shop/prod route/web@a": {"body": BODY}}, {}, "x")
    proxy = plain["apps"]["http"]["servers"]["shipway"]["routes"][0]["handle"][0]
    assert "response_header_timeout" not in proxy["transport"]  # only while a canary runs


def test_without_a_canary_the_config_is_as_before() -> None:
    plain = caddy.compose({"shop/prod route/web@a": {"body": BODY}}, {}, "x")
    assert "logging" not in plain
    assert "logs" not in plain["apps"]["http"]["servers"]["shipway"]
    assert plain["apps"]["http"]["servers"]["shipway"]["routes"][0] == caddy.route(BODY, 5.0)


def test_a_route_entry_with_a_canary_is_drift() -> None:
    assert caddy_canary.drift_of({"body": BODY}) == []
    assert caddy_canary.drift_of({"body": BODY, "canary": CANARY}) == [
        "a canary (shop.prod.r2) takes 10% of its requests"
    ]


def test_a_route_with_a_release_alias_reads_its_upstreams_from_its_file() -> None:
    """A route in the config itself (here: a config without a pool, as a per-slot proxy of
    before had) reads its release's alias from an upstream file of its own."""
    key = "shop/prod route/web@a"
    unit = {"body": {"upstreams": BODY["upstreams"]}, "group": "shipway-up-1"}
    config = caddy.compose({key: unit}, {}, "x")
    (handler,) = config["apps"]["http"]["servers"]["shipway"]["routes"][0]["handle"]
    source = f"{caddy.CONFIG_DIR}/{caddy.upstream_file(key)}"
    assert "upstreams" not in handler
    assert handler["dynamic_upstreams"] == {
        "source": "a",
        "name": f"{{file.{source}}}",
        "port": "80",
        "refresh": "1s",
        "versions": {"ipv4": True, "ipv6": False},
    }
    # on a shared proxy, the routes that take no pool entry (HTTPS here) have that file
    file = caddy.upstream_file(key)
    secure = {**unit, "body": {**unit["body"], "hosts": ["s.test"], "tls": {"auto": ["s.test"]}}}
    assert not caddy.pooled(secure)
    assert caddy.upstream_files({key: secure}) == {file: (b"shipway-up-1\n", 0o644)}
    assert caddy.upstream_files({key: unit}) == {}  # the catch-all entry's files instead
    # another release's alias: the same config (a switch reloads nothing)
    assert caddy.compose({key: {**unit, "group": "shipway-up-2"}}, {}, "x") == config
    # a canary names both releases' containers itself
    split = caddy.compose({key: {**unit, "canary": CANARY}}, {}, "x")
    route = split["apps"]["http"]["servers"]["shipway"]["routes"][0]
    proxy = route["handle"][-1]["routes"][2]["handle"][0]
    assert "dynamic_upstreams" not in proxy
    assert [u["dial"] for u in proxy["upstreams"]] == ["s-1:80", "s-2:80", "c-1:80"]
