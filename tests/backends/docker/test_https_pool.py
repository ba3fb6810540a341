"""The shared proxy's secure entries (pure): which HTTPS routes take them, that such a
route's arrival, switch and departure compose the same config once the proxy's ACME
settings are in it (nothing to reload), and what each entry's files say on the host that
orders the certificate and on the others. Caddy serves them, against the test ACME CA, in
test_https.py."""

from __future__ import annotations

from typing import Any

from shipway.backends.docker import caddy, https, https_pool

SHOP = "shop/prod route/web@a"
BLOG = "blog/prod route/web@a"
ACME = {"directory": "https://ca.test/dir", "root_pem": "PEM"}
PROXY = {"port": 80, "tls_port": 8443}


def unit(*names: str, group: str = "shipway-up-1", **tls: Any) -> dict[str, Any]:
    settings = {"auto": list(names), "given": [], "port": 8443, "acme": ACME, **tls}
    body = {"hosts": list(names), "upstreams": ["web-1:8000"], "tls": settings}
    return {"body": body, "group": group}


def compose(routes: dict[str, Any], previous: caddy.Pool) -> tuple[dict[str, Any], caddy.Pool]:
    pool = caddy.assign(routes, previous, secure=True)
    return caddy.compose(routes, PROXY, "x", {}, pool), pool


def test_https_routes_with_one_alias_and_the_proxy_s_acme_settings_take_entries() -> None:
    assert https_pool.pooled(unit("a.test"), None)
    assert https_pool.pooled(unit("a.test"), ACME)
    assert not https_pool.pooled(unit("a.test"), {"directory": "https://other.test/dir"})
    assert not https_pool.pooled({**unit("a.test"), "group": None}, ACME)
    assert not https_pool.pooled({**unit("a.test"), "canary": {"weight": 5}}, ACME)
    given = unit("a.test", given=[{"hosts": ["b.test"], "cert": "C", "key": "K"}])
    given["body"]["hosts"].append("b.test")
    assert https_pool.pooled(given, ACME)  # an ACME name and a given certificate's
    only_given = unit(auto=[], given=[{"hosts": ["g.test"], "cert": "C", "key": "K"}])
    only_given["body"]["hosts"] = ["g.test"]
    assert https_pool.pooled(only_given, {"directory": "https://other.test/dir"})
    mixed = unit("a.test")
    mixed["body"]["hosts"] = ["a.test", "plain.test"]  # a name served over HTTP only
    assert https_pool.pooled(mixed, ACME) and caddy.pooled(mixed)  # one pool each
    assert caddy.plain_names(mixed["body"]) == ["plain.test"]
    assert not caddy.pooled(unit("a.test"))  # no plain name: no host-name entry


def test_a_route_of_plain_and_https_names_comes_switches_and_goes_by_entries_alone() -> None:
    """Its plain names take host-name entries, its HTTPS names secure entries: the config
    is the same before, with and after it, and it has no upstream file."""
    _, pool = compose({BLOG: unit("blog.test")}, caddy.Pool(caddy.POOL_SIZE, {}))
    before, pool = compose({}, pool)  # the proxy's ACME settings in
    mixed = unit("a.test")
    mixed["body"]["hosts"] = ["a.test", "plain.test"]
    there, pool = compose({SHOP: mixed}, pool)
    switched, pool = compose({SHOP: {**mixed, "group": "shipway-up-2"}}, pool)
    assert there == before == switched
    assert [name for _, name in pool.entries.values()] == ["plain.test"]
    assert pool.secure is not None
    assert [name for _, name in pool.secure.entries.values()] == ["a.test"]
    files = caddy.pool_files({SHOP: mixed}, pool)
    assert files["pool-0.host"][0] == b"plain.test" and files["pool-0.up"][0] == b"shipway-up-1"
    (i,) = pool.secure.entries
    assert (
        files[f"secure-{i}.host"][0] == b"a.test" and files[f"secure-{i}.up"][0] == b"shipway-up-1"
    )
    assert caddy.upstream_files({SHOP: mixed}, pool) == {}
    # its HTTPS names with other ACME settings: they are in the config (a reload), its plain
    # one still in an entry; the config's routes read where they go from its upstream file
    other = unit("a.test", acme={"directory": "https://other.test/dir"})
    other["body"]["hosts"] = ["a.test", "plain.test"]
    config, pool = compose({SHOP: other}, pool)
    assert config != before and "a.test" in caddy.dumps(config).decode()
    assert "plain.test" not in caddy.dumps(config).decode()
    assert list(caddy.upstream_files({SHOP: other}, pool)) == [caddy.upstream_file(SHOP)]


def test_arriving_switching_and_leaving_compose_the_same_config_once_settings_are_in() -> None:
    start = caddy.Pool(caddy.POOL_SIZE, {})
    before, _ = compose({}, start)
    one, pool = compose({SHOP: unit("shop.test")}, start)
    # the first HTTPS route brings the proxy's ACME settings: that is a new config
    assert one != before and pool.secure is not None and pool.secure.acme == ACME
    policy = one["apps"]["tls"]["automation"]["policies"][-1]
    assert policy["on_demand"] and policy["issuers"][0]["ca"] == ACME["directory"]
    # from then on: another app's names, a switch, a departure: the same bytes
    two, pool = compose({SHOP: unit("shop.test"), BLOG: unit("blog.test", "www.test")}, pool)
    switched, pool = compose({SHOP: unit("shop.test", group="shipway-up-9")}, pool)
    gone, pool = compose({}, pool)
    assert one == two == switched == gone
    assert "shop.test" not in caddy.dumps(two).decode()  # no name is in the config
    # a given certificate's name too; a route with other ACME settings is in the config
    # itself (a reload)
    given = unit("g.test", given=[{"hosts": ["g.test"], "cert": "C", "key": "K"}], auto=[])
    assert compose({SHOP: given}, pool)[0] == gone
    elsewhere = unit("e.test", acme={"directory": "https://other.test/dir"})
    assert compose({SHOP: elsewhere}, pool)[0] != gone


def test_the_issuer_s_entry_orders_and_shares_and_another_host_s_asks_the_issuer() -> None:
    routes = {SHOP: unit("shop.test", hsts=True), BLOG: unit("blog.test", **{"from": "10.0.0.2"})}
    pool = caddy.assign(routes, caddy.Pool(caddy.POOL_SIZE, {}), secure=True)
    assert pool.secure is not None
    files = caddy.pool_files(routes, pool, {None: "mine", "10.0.0.2": "theirs"})
    (shop,) = [i for i, (k, _) in pool.secure.entries.items() if k == SHOP]
    (blog,) = [i for i, (k, _) in pool.secure.entries.items() if k == BLOG]

    def read(i: int, what: str) -> bytes:
        return files[f"secure-{i}.{what}"][0]

    assert read(shop, "host") == b"shop.test" and read(shop, "issue") == b"1"
    assert read(shop, "from") == b"" and read(shop, "hsts") == b"1"
    store = https.storage_key(ACME["directory"], "shop.test", "crt").removesuffix(".crt")
    assert read(shop, "store") == f"{store}".encode()
    assert read(shop, "keep") == f"127.0.0.1:{https.TLS_LISTEN}".encode()  # kept renewed
    assert read(blog, "issue") == b"" and read(blog, "from") == b"10.0.0.2"
    assert read(blog, "keep") == f"{https_pool.IDLE}".encode()
    assert files[f"secure-{blog}.token"] == (b"theirs", 0o600)  # the issuer's, 0600
    assert files[f"secure-{shop}.token"] == (b"", 0o600)
    assert files[https_pool.ROOT_FILE] == (b"PEM", 0o644)
    assert caddy.upstream_files(routes, pool) == {}  # their entries say where they go
    free = next(i for i in range(pool.secure.size) if i not in pool.secure.entries)
    assert read(free, "host") == b"- unused -" and read(free, "issue") == b""
    # names freed first, taken last: no request is matched to a name before its target
    order = list(files)
    assert order.index(f"secure-{free}.host") < order.index(f"secure-{shop}.up")
    assert order.index(f"secure-{shop}.up") < order.index(f"secure-{shop}.host")


def test_only_a_name_this_host_orders_is_permitted_and_the_relay_answers_204_for_it() -> None:
    config, _ = compose({SHOP: unit("shop.test")}, caddy.Pool(caddy.POOL_SIZE, {}))
    servers = config["apps"]["http"]["servers"]
    ask = servers["shipway-ask"]["routes"]
    assert ask[0]["match"][0]["vars"] == {"{file./etc/shipway/secure-0.issue}": ["1"]}
    assert ask[-1]["handle"][0]["status_code"] == 404
    relay = servers["shipway-relay"]["routes"]
    # each entry's routes behind one match of its name, on every port (a request for
    # another name reads one file of the entry, not one per route)
    for port in ("shipway-tls", "shipway"):
        entries = [r for r in servers[port]["routes"] if r.get("handle", [{}])[0].get("routes")]
        assert entries[0]["match"] == [{"host": ["{file./etc/shipway/secure-0.host}"]}]
        assert len(entries) == https_pool.SIZE
    # entry 0's routes behind one match of its name (one file read for another name)
    assert relay[0]["match"] == [{"query": {"server_name": ["{file./etc/shipway/secure-0.host}"]}}]
    ordered = relay[0]["handle"][0]["routes"][0]
    assert ordered["handle"][0]["status_code"] == 204  # then Caddy orders it on demand
    assert ordered["match"][0]["vars"] == {"{file./etc/shipway/secure-0.issue}": ["1"]}
    assert relay[-1]["handle"][0]["status_code"] == 404  # any other name: no certificate
    keeper = servers["shipway-keep"]["routes"][0]["handle"][0]
    assert keeper["transport"]["keep_alive"] == {"enabled": False}  # a handshake each time
    # what it asks for is answered by the proxy itself, before any entry's route: the app
    # never sees a keeper's request
    assert keeper["health_checks"]["active"]["uri"] == https_pool.KEEP_PATH
    first = servers["shipway-tls"]["routes"][0]
    assert first["match"][0]["path"] == [https_pool.KEEP_PATH]
    assert first["handle"] == [{"handler": "static_response", "status_code": 204}]
    assert keeper["transport"]["tls"]["server_name"] == "{file./etc/shipway/secure-0.host}"
    assert https_pool.KEEP_LOGGER in config["logging"]["logs"]["default"]["exclude"]


def test_a_proxy_made_for_a_slot_with_acme_names_has_their_settings_from_its_first_config() -> None:
    tree = caddy.seeded({}, ACME)
    assert caddy.seeded(tree, {"directory": "https://other.test/dir"}) == {}  # set once
    made, pool = compose({}, caddy.pool_of(tree))
    assert pool.secure is not None and pool.secure.acme == ACME
    arrived, _ = compose({SHOP: unit("shop.test")}, pool)
    assert arrived == made  # the slot's first route: no reload


def test_a_given_certificate_s_name_is_answered_by_the_relay_from_its_files() -> None:
    given = unit(auto=[], given=[{"hosts": ["g.test"], "cert": "C", "key": "K"}])
    given["body"]["hosts"] = ["g.test"]
    config, pool = compose({SHOP: given}, caddy.Pool(caddy.POOL_SIZE, {}))
    assert pool.secure is not None and pool.secure.acme is None and pool.secure.on
    # given certificates alone: the relay only, nothing ordered, no permission asked
    (policy,) = config["apps"]["tls"]["automation"]["policies"]
    assert "issuers" not in policy and "on_demand" not in config["apps"]["tls"]["automation"]
    files = caddy.pool_files({SHOP: given}, pool, {})
    stem = https.file_of(f"{SHOP} 0", "")  # what the route step writes from its secrets
    assert files["secure-0.given"][0] == f"{stem}".encode()
    assert files["secure-0.issue"][0] == b"" and files["secure-0.from"][0] == b""
    relay = config["apps"]["http"]["servers"]["shipway-relay"]["routes"]
    (answer,) = [
        r
        for r in relay[0]["handle"][0]["routes"]
        if r["handle"][0].get("given") == "{file./etc/shipway/secure-0.given}"
    ]
    assert answer["handle"][1] == {"handler": "templates", "file_root": "/etc/shipway"}
    assert "crt" in answer["handle"][2]["body"] and "key" in answer["handle"][2]["body"]
