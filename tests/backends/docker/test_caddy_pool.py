"""The shared proxy's pool of host-name entries and its catch-all entry (pure): which routes
take entries, where each keeps its place, that adding, removing or switching such a route
composes the same config (nothing to reload), and the order its files are written in.
Caddy serves them in test_shared_proxy.py."""

from __future__ import annotations

import json
from typing import Any

from shipway.backends.docker import caddy

SHOP = "shop/prod route/web@a"
BLOG = "blog/prod route/web@a"


def unit(*hosts: str, group: str = "shipway-up-1", **extra: Any) -> dict[str, Any]:
    body = {"hosts": list(hosts), "upstreams": ["web-1:8000"], **extra}
    return {"body": body, "group": group}


def test_plain_routes_with_one_alias_take_entries_and_no_others() -> None:
    assert caddy.pooled(unit("shop.test"))
    assert caddy.pooled(unit())  # answers every name: the catch-all entry
    assert not caddy.pooled({**unit("shop.test"), "group": None})  # containers of before
    assert not caddy.pooled({**unit(), "group": None})
    assert not caddy.pooled(unit("shop.test", tls={"auto": ["shop.test"]}))
    assert not caddy.pooled({**unit("shop.test"), "canary": {"weight": 10}})


def test_an_entry_keeps_its_place_a_freed_one_is_taken_again_and_the_pool_doubles() -> None:
    first = caddy.assign({SHOP: unit("a.test", "b.test")}, caddy.Pool(4, {}))
    assert first == caddy.Pool(4, {0: (SHOP, "a.test"), 1: (SHOP, "b.test")})
    both = caddy.assign({SHOP: unit("a.test", "b.test"), BLOG: unit("c.test")}, first)
    assert both.entries == {0: (SHOP, "a.test"), 1: (SHOP, "b.test"), 2: (BLOG, "c.test")}
    # shop drops a.test: b.test stays at 1, blog's at 2; the place freed is taken by the
    # next change, not this one (a request matched to a.test there would go to blog)
    fewer = caddy.assign({SHOP: unit("b.test"), BLOG: unit("c.test", "d.test")}, both)
    assert fewer.entries == {1: (SHOP, "b.test"), 2: (BLOG, "c.test"), 3: (BLOG, "d.test")}
    more = caddy.assign({SHOP: unit("b.test", "e.test"), BLOG: unit("c.test", "d.test")}, fewer)
    assert more.entries == {**fewer.entries, 0: (SHOP, "e.test")}
    grown = caddy.assign({SHOP: unit(*(f"{n}.test" for n in "abcde"))}, caddy.Pool(4, {}))
    assert grown.size == 8 and len(grown.entries) == 5
    assert caddy.assign({}, grown) == caddy.Pool(8, {})  # it never shrinks


def test_adding_removing_or_switching_a_pooled_route_composes_the_same_config() -> None:
    pool = caddy.Pool(caddy.POOL_SIZE, {})
    empty = caddy.compose({}, {}, "x", pool=pool)
    routes = {SHOP: unit("shop.test"), BLOG: unit("blog.test", group="shipway-up-2")}
    taken = caddy.assign(routes, pool)
    assert caddy.compose(routes, {}, "x", pool=taken) == empty
    switched = {**routes, SHOP: unit("shop.test", group="shipway-up-3")}
    assert caddy.compose(switched, {}, "x", pool=caddy.assign(switched, taken)) == empty
    # a route that takes no entry is in the config itself: adding it is a reload
    tls = {**routes, "x/y route/web@a": unit("x.test", tls={"auto": ["x.test"], "port": 443})}
    assert caddy.compose(tls, {}, "x", pool=caddy.assign(tls, taken)) != empty
    # nor a route without host names (a slot that declares none): the catch-all entry
    every = {**routes, "c/p route/web@a": unit(group="shipway-up-4")}
    held = caddy.assign(every, taken)
    assert held.catch_all == "c/p route/web@a" and held.entries == taken.entries
    assert caddy.compose(every, {}, "x", pool=held) == empty
    assert caddy.assign(routes, held).catch_all is None  # it leaves: freed
    # without a pool (a per-slot proxy of before) every route is in the config
    assert caddy.compose(routes, {}, "x") != caddy.compose({}, {}, "x")


def without_canary(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry route's reverse proxy while no canary splits it (its ``.id`` empty)."""
    read, split = entry["handle"]
    assert read == {"handler": "vars", "shipway_id": f"{{file.{entry_at(entry)}.id}}"}
    first = split["routes"][0]
    assert first["match"] == [{"vars": {"{http.vars.shipway_id}": [""]}}]
    (proxy,) = first["handle"]
    return dict(proxy)


def entry_at(entry: dict[str, Any]) -> str:
    name = str(entry["match"][0].get("host", [""])[0] or next(iter(entry["match"][0]["vars"])))
    return name.removeprefix("{file.").removesuffix(".host}")


def test_each_entry_matches_the_name_in_its_file_and_goes_where_its_files_say() -> None:
    server = caddy.compose({}, {}, "x", pool=caddy.Pool(2, {}))["apps"]["http"]["servers"]
    first, second, every, unknown = server["shipway"]["routes"]
    assert first["match"] == [{"host": [f"{{file.{caddy.CONFIG_DIR}/pool-0.host}}"]}]
    proxy = without_canary(second)
    assert proxy["dynamic_upstreams"]["name"] == f"{{file.{caddy.CONFIG_DIR}/pool-1.up}}"
    assert proxy["dynamic_upstreams"]["port"] == f"{{file.{caddy.CONFIG_DIR}/pool-1.port}}"
    # the catch-all entry: any name, while its file says so
    at = f"{caddy.CONFIG_DIR}/pool-any"
    assert every["match"] == [{"vars": {f"{{file.{at}.host}}": [caddy.ANY]}}]
    assert without_canary(every)["dynamic_upstreams"]["name"] == f"{{file.{at}.up}}"
    assert unknown == caddy.UNKNOWN_HOST


def test_host_routes_come_before_the_pool_and_a_catch_all_after_it() -> None:
    routes = {
        "a/p route/web@a": {"body": {"hosts": ["s.test"], "upstreams": ["w-1:80"]}},  # no alias
        "b/p route/web@a": {"body": {"upstreams": ["w-2:80"]}},  # every name, no alias
    }
    server = caddy.compose(routes, {}, "x", pool=caddy.Pool(1, {}))["apps"]["http"]["servers"]
    hosted, entry, every, any_entry, unknown = server["shipway"]["routes"]
    assert hosted["match"] == [{"host": ["s.test"]}]
    assert entry["match"] == [{"host": [f"{{file.{caddy.CONFIG_DIR}/pool-0.host}}"]}]
    # a catch-all in the config before the catch-all entry: one moving out of the entry
    # (its canary starting) is served by its own route once that config runs
    assert "match" not in every and "vars" in any_entry["match"][0]
    assert unknown == caddy.UNKNOWN_HOST


def test_the_files_free_names_first_and_take_names_last() -> None:
    before = caddy.Pool(3, {0: (BLOG, "old.test")})
    routes = {SHOP: unit("shop.test")}
    pool = caddy.assign(routes, before)
    files = caddy.pool_files(routes, pool)
    names = list(files)
    # blog's name freed before any target is written; shop's name once its target is there
    assert names.index("pool-0.host") < names.index("pool-1.up") < names.index("pool-1.host")
    assert files["pool-0.host"][0] == caddy.UNUSED.encode()
    assert files["pool-1.host"][0] == b"shop.test"
    assert files["pool-1.up"][0] == b"shipway-up-1"
    assert files["pool-1.port"][0] == b"8000"
    assert files["pool-0.up"][0] == b"" and files["pool-2.port"][0] == b""
    assert files["pool-any.host"][0] == caddy.UNUSED.encode()  # no catch-all
    table = json.loads(files[caddy.POOL_FILE][0])
    assert table == {"size": 3, "entries": {"1": [SHOP, "shop.test"]}}
    assert caddy.pool_of({caddy.POOL_FILE: files[caddy.POOL_FILE]}) == pool
    assert caddy.pool_aliases(SHOP, routes[SHOP], files) == ["shipway-up-1"]


def test_the_catch_all_entry_is_taken_after_its_target_and_freed_first() -> None:
    every = "c/p route/web@a"
    routes = {SHOP: unit("shop.test"), every: unit(group="shipway-up-7")}
    pool = caddy.assign(routes, caddy.Pool(2, {}))
    files = caddy.pool_files(routes, pool)
    names = list(files)
    assert names.index("pool-any.up") < names.index("pool-any.host")
    assert files["pool-any.host"][0] == b"*" and files["pool-any.up"][0] == b"shipway-up-7"
    assert files["pool-any.port"][0] == b"8000"
    assert caddy.pool_aliases(every, routes[every], files) == ["shipway-up-7"]
    # it leaves: its files free the entry, and are written first (before any target)
    gone = caddy.pool_files({SHOP: routes[SHOP]}, caddy.assign({SHOP: routes[SHOP]}, pool))
    assert {"pool-any.host", "pool-any.port", "pool-any.up"} <= set(caddy.freed(gone))
    assert caddy.pool_aliases(every, routes[every], gone) == []  # not taken: no alias
    assert list(gone).index("pool-any.host") < list(gone).index("pool-0.up")


def test_a_missing_or_unreadable_pool_file_is_an_empty_pool_of_the_first_size() -> None:
    assert caddy.pool_of({}) == caddy.Pool(caddy.POOL_SIZE, {})
    assert caddy.pool_of({caddy.POOL_FILE: (b"{not json", 0o644)}) == caddy.Pool(
        caddy.POOL_SIZE, {}
    )


def test_the_files_that_free_an_entry_are_its_name_alias_and_port() -> None:
    before = caddy.Pool(2, {0: (BLOG, "old.test"), 1: (SHOP, "shop.test")})
    routes = {SHOP: unit("shop.test", group="shipway-up-9")}
    files = caddy.pool_files(routes, caddy.assign(routes, before))
    each = ("host", "id", "port", "up")  # its canary's id too
    assert sorted(caddy.freed(files)) == [
        f"{at}.{k}" for at in ("pool-0", "pool-any") for k in each
    ]
