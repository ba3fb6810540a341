"""The Caddy config of a canary (pure): weights that give the canary its share, the split
route (tester's header, sticky cookie, weighted fallback), its access log, and a route with
a canary observed as drifted; on a shared proxy, a canary that splits its route's pool
entries by their files alone (the same config: no reload). Caddy itself runs them in
test_canary.py."""

from __future__ import annotations

from typing import Any

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
    empty = caddy.Pool(caddy.POOL_SIZE, {})
    assert caddy.upstream_files({key: secure}, empty) == {file: (b"shipway-up-1", 0o644)}
    assert caddy.upstream_files({key: unit}, empty) == {}  # the catch-all entry's instead
    # another release's alias: the same config (a switch reloads nothing)
    assert caddy.compose({key: {**unit, "group": "shipway-up-2"}}, {}, "x") == config
    # a canary names both releases' containers itself
    split = caddy.compose({key: {**unit, "canary": CANARY}}, {}, "x")
    route = split["apps"]["http"]["servers"]["shipway"]["routes"][0]
    proxy = route["handle"][-1]["routes"][2]["handle"][0]
    assert "dynamic_upstreams" not in proxy
    assert [u["dial"] for u in proxy["upstreams"]] == ["s-1:80", "s-2:80", "c-1:80"]


SHOP = "shop/prod route/web@a"
POOLED = {"body": {"hosts": ["shop.test"], "upstreams": ["s-1:80"]}, "group": "shipway-up-1"}
SPLIT = {**CANARY, "group": "shipway-up-2", "since": 1.0}


def pooled_config(routes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, tuple[bytes, int]]]:
    """A shared proxy's config and pool files for ``routes`` (a pool of 2)."""
    pool = caddy.assign(routes, caddy.Pool(2, {}))
    return caddy.compose(routes, {}, "x", pool=pool), caddy.pool_files(routes, pool)


def test_a_pooled_route_s_canary_starts_moves_and_ends_by_its_entry_s_files_alone() -> None:
    plain, before = pooled_config({SHOP: POOLED})
    split, during = pooled_config({SHOP: {**POOLED, "canary": SPLIT}})
    at_fifty, _ = pooled_config({SHOP: {**POOLED, "canary": {**SPLIT, "weight": 50}}})
    assert split == plain == at_fifty  # the same config: no reload
    # without a canary (so at its end) the id alone is written, empty: a request that read
    # it a moment before the end still finds the canary's alias
    assert before["pool-0.id"][0] == b"" and "pool-0.canary" not in before
    assert during["pool-0.canary"] == (b"shipway-up-2", 0o644)  # the canary's alias
    assert during["pool-0.cut"][0] == caddy_canary.cut(10).encode() == b"199a"
    assert during["pool-0.id"][0] == b"shop.prod.r2"
    assert during["pool-0.up"][0] == b"shipway-up-1"  # the stable's, as before
    # the split starts once what it splits to is written, and ends before that goes
    names = list(during)
    assert names.index("pool-0.canary") < names.index("pool-0.cut") < names.index("pool-0.id")
    # its requests logged by side from the first config on
    assert plain["logging"]["logs"][caddy_canary.LOGGER]["include"] == [
        f"http.log.access.{caddy_canary.LOGGER}"
    ]
    assert plain["apps"]["http"]["servers"]["shipway"]["logs"] == {}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"answer_timeout": 1.5}, "another answer timeout than the config's"),
        ({"group": None}, "no alias names exactly its containers"),
        ({"upstreams": ["c-1:81"]}, "another port than the route's"),
    ],
)
def test_a_canary_that_cannot_split_the_entries_puts_its_route_in_the_config(
    change: dict[str, Any], why: str
) -> None:
    plain, _ = pooled_config({SHOP: POOLED})
    split, files = pooled_config({SHOP: {**POOLED, "canary": {**SPLIT, **change}}})
    assert split != plain, why  # a reload, the route's split in the config as before
    assert files["pool-0.host"][0] == caddy.UNUSED.encode()
    routes = split["apps"]["http"]["servers"]["shipway"]["routes"]
    assert routes[0]["match"] == [{"host": ["shop.test"]}]
    assert routes[0]["handle"][-1]["handler"] == "subroute"


def test_the_cut_gives_the_canary_its_share_of_random_ids() -> None:
    assert caddy_canary.cut(0) == "0000"  # no version 4 id is below it
    assert caddy_canary.cut(100) == "g"  # every one is
    assert caddy_canary.cut(50) == "8000"
    cuts = [caddy_canary.cut(p) for p in range(0, 101)]
    assert cuts == sorted(cuts) and len(set(cuts)) == 101
    for p in (1, 10, 25, 99):
        assert abs(int(caddy_canary.cut(p), 16) / caddy_canary.CUT_STEPS - p / 100) < 1e-4


def test_an_entry_splits_by_header_cookie_and_random_id_and_logs_the_side() -> None:
    config, _ = pooled_config({SHOP: POOLED})
    entry = config["apps"]["http"]["servers"]["shipway"]["routes"][0]
    at = f"{caddy.CONFIG_DIR}/pool-0"
    read, outer = entry["handle"]
    assert read == {"handler": "vars", "shipway_id": f"{{file.{at}.id}}"}
    alone, running = outer["routes"]
    assert alone["match"] == [{"vars": {"{http.vars.shipway_id}": [""]}}]
    (cut, inner) = running["handle"]
    assert cut == {"handler": "vars", "shipway_cut": f"{{file.{at}.cut}}"}
    to_canary, to_stable = inner["routes"]
    assert to_canary["match"] == [{"expression": caddy_canary.TO_CANARY}]
    for side, route, file in (("canary", to_canary, "canary"), ("stable", to_stable, "up")):
        handlers = {h["handler"]: h for h in route["handle"]}
        assert {"handler": "log_append", "key": caddy_canary.FIELD_SIDE, "value": side} in (
            route["handle"]
        )
        cookie = handlers["headers"]["response"]["add"]["Set-Cookie"]  # added: the app's stay
        assert cookie == [f"shipway-canary={{http.vars.shipway_id}}.{side}; Path=/; "
                          "HttpOnly; SameSite=Lax"]  # fmt: skip
        proxy = handlers["reverse_proxy"]
        assert proxy["dynamic_upstreams"]["name"] == f"{{file.{at}.{file}}}"
        assert proxy["transport"]["response_header_timeout"] == 30 * 10**9
        # tried a second, on this side's release alone (one alias)
        assert proxy["load_balancing"]["try_duration"] == "1000ms"


def test_a_secure_entry_splits_the_same_way() -> None:
    tls = {"auto": ["shop.test"]}
    unit = {**POOLED, "body": {**POOLED["body"], "tls": tls}}
    routes: dict[str, Any] = {SHOP: unit}
    proxy = {"tls_port": 443}
    pool = caddy.assign(routes, caddy.Pool(2, {}), secure=True)
    plain = caddy.compose(routes, proxy, "x", pool=pool)
    routes = {SHOP: {**unit, "canary": SPLIT}}
    pool = caddy.assign(routes, pool, secure=True)
    assert caddy.compose(routes, proxy, "x", pool=pool) == plain
    files = caddy.pool_files(routes, pool)
    assert (
        files["secure-0.canary"][0] == b"shipway-up-2"
        and files["secure-0.id"][0] == b"shop.prod.r2"
    )


def test_an_entry_kept_for_a_route_whose_canary_has_no_alias_is_written_without_a_split() -> None:
    """The pool as a proxy's files said it, for routes whose canary cannot split entries:
    its entry's files are written as without a canary (its split is in the config)."""
    pool = caddy.assign({SHOP: POOLED}, caddy.Pool(2, {}))
    files = caddy.pool_files({SHOP: {**POOLED, "canary": CANARY}}, pool)  # no "group"
    assert files["pool-0.id"][0] == b"" and "pool-0.canary" not in files
    assert list(files).index("pool-0.id") < list(files).index("pool-0.up")  # freed first
