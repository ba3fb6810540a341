"""The proxy's configuration: Caddy's native JSON, composed from route units. PURE.

A switch changes no Caddy config (docs/docker.md): a route whose containers were given
their release's network alias (:func:`.labels.release_alias`) takes its upstreams from a
file, its *upstream file* (``{file.PATH}``, read by Caddy at each request, as the name of
Caddy's ``a`` dynamic upstreams: every address that name resolves to on the proxy's
networks, round-robin). Moving the route to another release's containers rewrites that
file only — no reload, whose new listener can lose another app's request (Go's
``Server.Shutdown`` closes a connection it accepted and read without answering). Nor does
adding or removing such a route, changing its host names or its port: the config holds a
*pool* of host-name entries from its first version on (:class:`Pool`), each one matched
against a name read from a file at each request, and proxied to the alias and port read
from two more; a route whose containers carry one alias takes an entry per host name it
serves over plain HTTP (:func:`plain_names`; the one *catch-all entry*, after every other
route, when it has no name: a slot that declares no routes), and a route added or removed
writes those files only. The config is reloaded only when it changes: a route that is not
such (HTTPS names not in secure entries, :mod:`.https_pool`; one whose canary cannot split
its entries by their files, :mod:`.caddy_canary`; one whose containers carry no alias),
the pool grown (:data:`POOL_SIZE`, doubled when full), a longer drain. The files are written
through the Engine API (``put_archive`` into the proxy's volume), a config loaded through
Caddy's admin API on its unix socket in that volume where shipway can reach it
(:mod:`.admin`), else by an ``exec`` of ``caddy reload``.

Files in the proxy's volume (mounted at :data:`CONFIG_DIR`):

``slots.json``   a host's shared proxy (one per host and port, every app's and slot's):
                 each slot's applied route units, ``{"app/slot": {key: {"key", "digest",
                 "body"}}}`` — what observe reads back; each slot writes only its own part;
``routes.json``  a per-slot proxy of before the shared one: ``{key: {...}}`` (read to move
                 its routes over, never written any more);
``caddy.json``   the Caddy config composed from them, what Caddy loads at start and reload;
``loaded.sha``   the digest of the ``caddy.json`` Caddy was last made to load (a run killed
                 between the write and the load leaves it older: the next switch reloads);
``upstream-*``   a route's upstream file: its release's alias (:func:`upstream_file`);
``pool.json``    the pool's size and which route and host name holds each entry;
``pool-N.host``  entry N's host name (:data:`UNUSED` when free), ``pool-N.up`` the alias it
                 goes to, ``pool-N.port`` the port (:func:`pool_files`), ``pool-N.canary``,
                 ``.cut`` and ``.id`` a canary's split (:mod:`.caddy_canary`); ``pool-any.*``
                 the catch-all entry's (its ``.host`` :data:`ANY` while taken);
``secure-N.*``   on a proxy that serves HTTPS, the secure entries of HTTPS names
                 (:mod:`.https_pool`: their arrival and departure load no config either);
``admin.sock``   Caddy's admin API (made by Caddy; not a file the config writes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from shipway.backends.docker import caddy_canary, https, https_pool
from shipway.backends.docker.entries import UNUSED, line, place, port_of, table, table_of

CONFIG_DIR = "/etc/shipway"
ROUTES_FILE = "routes.json"
PARTS_FILE = "slots.json"
CONFIG_FILE = "caddy.json"
ADMIN_SOCKET = "admin.sock"
LOADED_FILE = "loaded.sha"
#: where a config composed before the admin socket has its admin API (the proxy's own
#: loopback): still taken as up to date, and replaced by the next reload
LEGACY_ADMIN = "localhost:2019"
#: how long a kept-alive connection to an upstream may stay unused
UPSTREAM_IDLE = "1s"
POOL_FILE = "pool.json"
#: what an entry's files are named from: ``pool-N.host``, ``pool-N.up``, ``pool-N.port``
POOL_ENTRY = "pool-"
#: the pool's entries in a proxy's first config (doubled, by a reload, when all are taken)
POOL_SIZE = 16
#: the entry of the route without host names (a slot that declares no routes): its files
#: ``pool-any.host`` (:data:`ANY` while taken, else :data:`UNUSED`), ``.up`` and ``.port``
CATCH_ALL_ENTRY = f"{POOL_ENTRY}any"
#: what the catch-all entry's ``.host`` file says while a route takes it
ANY = "*"


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def loaded(config: bytes) -> bytes:
    """The content of :data:`LOADED_FILE` once Caddy was made to load ``config``."""
    return hashlib.sha256(config).hexdigest().encode() + b"\n"


def upstream_file(key: str) -> str:
    """The name of the upstream file of the route ``key`` (``"app/slot key"``) in the
    proxy's config directory."""
    return f"upstream-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


def upstream_files(
    routes: Mapping[str, Mapping[str, Any]], pool: Pool
) -> dict[str, tuple[bytes, int]]:
    """Each route's upstream file on a shared proxy with ``pool`` (of those that name their
    release's alias and have names served by routes in the config: :func:`in_config`): its
    content."""
    return {
        upstream_file(k): line(str(f["group"]))
        for k, f in routes.items()
        if f.get("group") and in_config(k, f, pool)
    }


def _dynamic(source: str, port: str) -> dict[str, Any]:
    """Caddy's ``a`` upstreams: the name in file ``source``, read at each request, resolved
    (at most a second old; again after a failed try) on the proxy's networks, at ``port``
    (a placeholder too)."""
    return {
        "source": "a",
        "name": f"{{file.{source}}}",
        "port": port,
        "refresh": "1s",
        "versions": {"ipv4": True, "ipv6": False},  # unset is true
    }


def route(
    body: Mapping[str, Any],
    upstream_try: float,
    canary: Mapping[str, Any] | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """One Caddy route: requests for the body's host names (all, when none) go round-robin
    to its upstreams. A dial that fails (container going away) is retried on the others,
    and on the same one, for ``upstream_try`` seconds before the client gets a 502.
    ``canary``: a canary beside it, split by weight (:mod:`.caddy_canary`). ``source``: its
    upstream file (the body's upstreams are then all the addresses its name resolves to)."""
    upstreams: dict[str, Any] = {"upstreams": [{"dial": u} for u in body["upstreams"]]}
    if source and not canary:
        upstreams = {"dynamic_upstreams": _dynamic(source, port_of(body))}
    out: dict[str, Any] = {"handle": [_reverse_proxy(upstreams, upstream_try)], "terminal": True}
    if body.get("hosts"):
        out["match"] = [{"host": list(body["hosts"])}]
    return out if not canary else caddy_canary.split_route(out, body, canary)


def _reverse_proxy(upstreams: Mapping[str, Any], upstream_try: float) -> dict[str, Any]:
    return {
        "handler": "reverse_proxy",
        **upstreams,
        # a kept-alive connection to an upstream closes after 1 s unused (Caddy's default
        # is 2 minutes; a reload does not close the old config's idle ones): an old
        # container's drain, which waits for its last connection, then ends within 1 s of
        # its last request, not at drain_timeout
        "transport": {"protocol": "http", "keep_alive": {"idle_timeout": UPSTREAM_IDLE}},
        "load_balancing": {
            "selection_policy": {"policy": "round_robin"},
            "try_duration": _duration(upstream_try),
            "try_interval": "100ms",
        },
    }


class Pool(NamedTuple):
    """A shared proxy's host-name entries: how many its config holds, and which route
    (``"app/slot key"``) and host name each taken one serves; and which route takes the
    catch-all entry (every request no other route takes), if one does (from the routes:
    not in ``pool.json``)."""

    size: int
    entries: Mapping[int, tuple[str, str]]
    catch_all: str | None = None
    #: the secure entries (HTTPS names, :mod:`.https_pool`): None on a proxy without HTTPS
    secure: https_pool.Secure | None = None


def pooled(unit: Mapping[str, Any]) -> bool:
    """Whether a route unit takes pool entries: one alias (and a canary beside it, if any,
    that splits entries: :func:`.caddy_canary.in_entries`), and names served over plain
    HTTP (:func:`plain_names`; its HTTPS ones take secure entries, or are in the config);
    an entry per such name, or the catch-all entry when it has no name at all."""
    body = unit.get("body") or {}
    if not (unit.get("group") and body.get("upstreams") and caddy_canary.in_entries(unit)):
        return False
    return not body.get("tls") or bool(plain_names(body))


def plain_names(body: Mapping[str, Any]) -> list[str]:
    """The host names a route body serves over plain HTTP: all but its HTTPS ones (which
    are redirected to HTTPS)."""
    secure = set(https.names_of(body)) if body.get("tls") else set()
    return [str(h) for h in dict.fromkeys(body.get("hosts") or []) if h not in secure]


def in_config(key: str, unit: Mapping[str, Any], pool: Pool | None) -> bool:
    """Whether some of the route ``key``'s names are served by routes in the config itself
    (not by entries of ``pool``): then its upstream file, when it has an alias, says where
    they go."""
    if pool is None:
        return True
    body = unit.get("body") or {}
    plain = bool(plain_names(body) or not body.get("hosts"))
    secure = pool.secure
    entered = secure is not None and any(k == key for k, _ in secure.entries.values())
    return (plain and not pooled(unit)) or (bool(body.get("tls")) and not entered)


def pool_of(tree: Mapping[str, tuple[bytes, int]]) -> Pool:
    """The pool a proxy's files say (an empty one of :data:`POOL_SIZE` when they say
    none: a proxy configured before the pool)."""
    try:
        raw = json.loads(tree[POOL_FILE][0]) if POOL_FILE in tree else {}
        size, entries = table_of(raw, POOL_SIZE)
    except (ValueError, TypeError, AttributeError):
        return Pool(POOL_SIZE, {})
    secure = raw.get("secure")
    return Pool(size, entries, None, https_pool.of(secure) if isinstance(secure, dict) else None)


def seeded(
    tree: Mapping[str, tuple[bytes, int]], acme: Mapping[str, Any] | None
) -> dict[str, tuple[bytes, int]]:
    """``pool.json`` with the secure entries in the config (a proxy made for a slot with
    HTTPS names: they then come without a reload) and ``acme`` as their ACME settings when
    it has none yet (None: the slot has given certificates only); else nothing to change."""
    try:
        raw = dict(json.loads(tree[POOL_FILE][0])) if POOL_FILE in tree else {}
    except (ValueError, TypeError):
        raw = {}
    secure = dict(raw.get("secure") or {})
    if secure.get("on") and (acme is None or secure.get("acme") is not None):
        return {}
    raw["secure"] = {**secure, "on": True}
    if acme is not None and secure.get("acme") is None:
        raw["secure"]["acme"] = dict(acme)
    return {POOL_FILE: (dumps(raw), 0o644)}


def assign(
    routes: Mapping[str, Mapping[str, Any]], previous: Pool, secure: bool = False
) -> Pool:
    """The pool for ``routes``: an entry already taken keeps its place (its files are not
    written again), one no route needs any more is freed, a new one takes the lowest place
    that was free before; the size doubles while that is not enough (a reload), and never
    shrinks. The catch-all entry goes to the route without host names, if one takes it.
    ``secure``: the proxy serves HTTPS, so its HTTPS names take secure entries too."""
    held = None
    if secure:
        empty = https_pool.Secure(https_pool.SIZE, {}, None)
        held = https_pool.assign(routes, previous.secure or empty)
    wanted = [
        (key, str(host))
        for key, unit in sorted(routes.items())
        if pooled(unit)
        for host in plain_names(unit["body"])
    ]
    entries, size = place(wanted, previous.entries, previous.size)
    # at most one: a second slot without host names is refused (catch_all_of)
    catch_all = next(
        (k for k, u in sorted(routes.items()) if pooled(u) and not u["body"].get("hosts")), None
    )
    return Pool(size, entries, catch_all, held)


def pool_files(
    routes: Mapping[str, Mapping[str, Any]],
    pool: Pool,
    tokens: Mapping[str | None, str] | None = None,
) -> dict[str, tuple[bytes, int]]:
    """The pool's files and its ``pool.json``, in the order to write them: the host names
    of entries freed first (no request is matched to them from then on), then every
    entry's alias and port, then the host names of entries taken (matched only once what
    they go to is there)."""
    freed: dict[str, tuple[bytes, int]] = {}
    targets: dict[str, tuple[bytes, int]] = {}
    names: dict[str, tuple[bytes, int]] = {}

    def entry(at: str, unit: Mapping[str, Any] | None, name: str) -> None:
        if unit is None:
            freed[f"{at}.host"] = line(UNUSED)
            alias, port = "", ""
        else:
            names[f"{at}.host"] = line(name)
            alias, port = str(unit["group"]), port_of(unit["body"])
        targets.update({f"{at}.up": line(alias), f"{at}.port": line(port)})
        split, switch = caddy_canary.entry_files(at, (unit or {}).get("canary"))
        targets.update(split)
        (names if switch[f"{at}.id"][0] else freed).update(switch)

    for i in range(pool.size):
        held = pool.entries.get(i)
        entry(_entry(i), routes.get(held[0]) if held else None, held[1] if held else "")
    entry(CATCH_ALL_ENTRY, routes.get(pool.catch_all) if pool.catch_all else None, ANY)
    kept = table(pool.size, pool.entries)
    secure: dict[str, tuple[bytes, int]] = {}
    if pool.secure is not None:
        kept["secure"] = https_pool.table(pool.secure)
        secure = https_pool.root_files(pool.secure)
        secure |= https_pool.files(routes, pool.secure, tokens or {})
    return {**secure, **freed, **targets, **names, POOL_FILE: (dumps(kept), 0o644)}


def _entry(i: int) -> str:
    """What the files of pool entry ``i`` are named from (``pool-N.host`` …)."""
    return f"{POOL_ENTRY}{i}"


def freed(files: Mapping[str, tuple[bytes, int]]) -> dict[str, tuple[bytes, int]]:
    """The files among ``files`` that free a pool entry or a secure entry: its host name
    and what it goes to."""
    entries = {
        k.removesuffix(".host")
        for k, v in files.items()
        if k.startswith((POOL_ENTRY, https_pool.ENTRY))
        and k.endswith(".host")
        and v == line(UNUSED)
    }
    return {k: v for k, v in files.items() if k.rsplit(".", 1)[0] in entries}


def pool_aliases(
    key: str, unit: Mapping[str, Any], tree: Mapping[str, tuple[bytes, int]]
) -> list[str]:
    """What the pool entries of the route ``key`` (``"app/slot key"``, ``unit``) go to, as
    written: the catch-all entry's for a route without host names, while it is taken."""

    def read(name: str) -> str:
        return tree.get(name, (b"", 0))[0].decode(errors="replace").strip()

    if not (unit.get("body") or {}).get("hosts"):
        taken = read(f"{CATCH_ALL_ENTRY}.host") == ANY
        return [read(f"{CATCH_ALL_ENTRY}.up")] if taken else []
    held = sorted(i for i, (k, _) in pool_of(tree).entries.items() if k == key)
    return [read(f"{_entry(i)}.up") for i in held]


def _pool_routes(
    pool: Pool, upstream_try: float, config_dir: str, split: bool
) -> list[dict[str, Any]]:
    """The pool's routes: entry N takes the requests for the name in ``pool-N.host`` to
    the alias in ``pool-N.up`` at the port in ``pool-N.port`` — all read at each request."""
    out = []
    for i in range(pool.size):
        at = f"{config_dir}/{_entry(i)}"
        out.append(_entry_route({"host": [f"{{file.{at}.host}}"]}, at, upstream_try, split))
    return out


def _catch_all_route(upstream_try: float, config_dir: str, split: bool) -> dict[str, Any]:
    """The catch-all entry's route: every request that reaches it while ``pool-any.host``
    says :data:`ANY`, to the alias and port in its two other files (read at each request;
    Caddy's ``vars`` matcher reads a placeholder named as its key)."""
    at = f"{config_dir}/{CATCH_ALL_ENTRY}"
    return _entry_route({"vars": {f"{{file.{at}.host}}": [ANY]}}, at, upstream_try, split)


def _entry_route(
    match: dict[str, Any], at: str, upstream_try: float, split: bool
) -> dict[str, Any]:
    handle = entry_handle(at, upstream_try, split)
    return {"match": [match], "handle": handle, "terminal": True}


def entry_handle(at: str, upstream_try: float, split: bool = True) -> list[dict[str, Any]]:
    """What an entry (``at``: the path its files are named from) does with a request: to
    the alias in its ``.up`` at the port in its ``.port``, or split with a canary's alias
    (:func:`.caddy_canary.entry_handle`; ``split`` False: never, as before the split)."""

    def proxied(file: str, timeout: float | None) -> dict[str, Any]:
        upstreams = {"dynamic_upstreams": _dynamic(f"{at}{file}", f"{{file.{at}.port}}")}
        handler = _reverse_proxy(upstreams, upstream_try)
        if timeout is not None:
            # a side of a canary's split: a hanging answer ends in the proxy's 504, counted;
            # a refused one in its 502 within a second (tried on its own release alone)
            handler["transport"]["response_header_timeout"] = int(timeout * 1e9)
            handler["load_balancing"]["try_duration"] = _duration(caddy_canary.SIDE_TRY)
        return handler

    return caddy_canary.entry_handle(at, proxied) if split else [proxied(".up", None)]


#: what a request for a host name no route serves gets: 404 and one line
UNKNOWN_HOST: dict[str, Any] = {
    "handle": [
        {
            "handler": "static_response",
            "status_code": 404,
            "headers": {"Content-Type": ["text/plain; charset=utf-8"]},
            "body": "404: no app serves {http.request.host} on this host\n",
        }
    ],
    "terminal": True,
}

#: what a request gets when the route's release does not answer (no container took it:
#: gone, stopped, refusing): the proxy's own 502/503 with a body that says so
RELEASE_DOWN: dict[str, Any] = {
    "handle": [
        {
            "handler": "static_response",
            "status_code": "{http.error.status_code}",
            "headers": {"Content-Type": ["text/plain; charset=utf-8"]},
            "body": "{http.error.status_code}: the release serving {http.request.host} on "
            "this host is down (none of its containers answered)\n",
        }
    ]
}


def flatten(parts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Every slot's route units of a shared proxy as one mapping, ``"app/slot key"`` →
    unit (the order of :func:`compose`: by slot, then by key)."""
    return {f"{owner} {key}": f for owner, part in parts.items() for key, f in part.items()}


def catch_all_of(parts: Mapping[str, Mapping[str, Any]], owner: str) -> str | None:
    """Another slot of a shared proxy that answers every request (a route without host
    names) when ``owner``'s part has such a route too: one of them would never be reached,
    so the second is refused. None when there is no such clash."""

    def catch_all(part: Mapping[str, Any]) -> bool:
        return any(not (f.get("body") or {}).get("hosts") for f in part.values())

    if not catch_all(parts.get(owner) or {}):
        return None
    return next((o for o, part in sorted(parts.items()) if o != owner and catch_all(part)), None)


def compose(
    routes: Mapping[str, Mapping[str, Any]],
    proxy: Mapping[str, Any],
    identity: str | None,
    tokens: Mapping[str | None, str] | None = None,
    pool: Pool | None = None,
    split: bool = True,
) -> dict[str, Any]:
    """The whole Caddy config for one proxy. Host-matched routes come first, the pool's
    entries next, catch-all routes next, then the answer for a host no route serves (404);
    order is otherwise by key, so the same routes give the same bytes. A request whose
    route's containers do not answer gets the proxy's 502 (or 503) with a line that says so.
    ``identity``: the server's ``@id``, which the admin socket is asked for before a load
    (:mod:`.admin`); None composes the config of before (admin API on the loopback).
    ``pool``: a shared proxy's (its routes that take entries are not in the config, only
    the pool's size is); None: a per-slot proxy of before, every route in its config.
    ``split`` False: its entries as before a canary could split them (observe takes such a
    config as up to date until its next load)."""
    ordered = sorted(routes.items(), key=lambda kv: (not kv[1]["body"].get("hosts"), kv[0]))
    upstream_try = float(proxy.get("upstream_try", 5.0))
    config_dir = str(proxy.get("config_dir", CONFIG_DIR)).rstrip("/")
    admin = LEGACY_ADMIN if identity is None else f"unix/{config_dir}/{ADMIN_SOCKET}"
    server: dict[str, Any] = {} if identity is None else {"@id": identity}
    # how long the old config's connections may finish after a reload: past the longest
    # drain window of the slots served and the old containers' own stop timeout
    drains = [float(f["body"].get("drain", 0)) for _, f in ordered]
    drain = max([float(proxy.get("drain", 5.0)), *drains])
    plain = [(k, f) for k, f in ordered if pool is None or not pooled(f)]
    http_port, tls_port = int(proxy.get("port", 80)), int(proxy.get("tls_port") or 0)
    # the HTTPS names that take secure entries: their routes are not in the config
    # (from the first one's arrival on, or the proxy's making for one)
    held = pool.secure if pool is not None and tls_port else None
    held = held if held is not None and held.on else None
    entered = {k for k, _ in held.entries.values()} if held else set()
    secure = [(k, f) for k, f in ordered if f["body"].get("tls") and k not in entered]
    servers: dict[str, Any] = {
        "shipway": {
            **server,
            "listen": [f":{int(proxy.get('listen', 80))}"],
            "automatic_https": {"disable": True},
            "routes": [
                *(r for k, f in secure for r in https.http_routes(k, f["body"], http_port)),
                *(route(b, upstream_try, f.get("canary"), _source(k, f, config_dir))
                  for k, f in plain if (b := _plain(f["body"])) and b.get("hosts")),
                *(_pool_routes(pool, upstream_try, config_dir, split) if pool else ()),
                *(https_pool.http_routes(held, config_dir, http_port, tls_port) if held else ()),
                *(route(b, upstream_try, f.get("canary"), _source(k, f, config_dir))
                  for k, f in plain if (b := _plain(f["body"])) and not b.get("hosts")),
                # after a catch-all in the config: one moving out of the entry (a canary
                # starting) is served by its route as soon as that config runs
                *((_catch_all_route(upstream_try, config_dir, split),) if pool else ()),
                UNKNOWN_HOST,
            ],
            "errors": {"routes": [RELEASE_DOWN]},
        }
    }  # fmt: skip
    apps: dict[str, Any] = {}
    if tls_port:
        # from its first config on: Caddy keeps the renewal check's interval it started with
        apps["tls"] = https.tls_app(dict(secure), config_dir)
        if held:
            automation = apps["tls"]["automation"]
            automation["policies"].append(https_pool.policy(held, config_dir, https.RELAY))
            if held.acme is not None:
                automation["on_demand"] = https_pool.permission()
    if (secure or held) and tls_port:
        servers |= _tls_servers(
            secure, upstream_try, config_dir, tokens or {}, held, tls_port, split
        )
    logging: dict[str, Any] = {}
    # a canary's requests logged, and only those; on a shared proxy from its first config
    # on (a canary in its entries then starts without a reload)
    if (pool is not None and split) or any(f.get("canary") for _, f in ordered):
        logging = {"logging": caddy_canary.LOGGING}
        for name in ("shipway", "shipway-tls"):
            if name in servers:
                servers[name]["logs"] = {}
    if held:  # the keepers' checks are not the proxy's news
        logging = {"logging": https_pool.quiet(logging.get("logging"))}
    return {
        "admin": {"listen": admin, "config": {"persist": False}},
        **logging,
        "apps": {
            "http": {
                "grace_period": _duration(drain + float(proxy.get("stop_timeout", 10))),
                "servers": servers,
            },
            **apps,
        },
    }


def _source(key: str, unit: Mapping[str, Any], config_dir: str) -> str | None:
    """Where the route ``key``'s upstream file is in the proxy (None: it names none)."""
    return f"{config_dir}/{upstream_file(key)}" if unit.get("group") else None


def _plain(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A route body as its plain-HTTP route: without its HTTPS names (they are redirected);
    None when it has no other."""
    if not body.get("tls"):
        return body
    rest = plain_names(body)
    return {**body, "hosts": rest} if rest else None


def _tls_servers(
    secure: list[tuple[str, Mapping[str, Any]]],
    upstream_try: float,
    config_dir: str,
    tokens: Mapping[str | None, str],
    held: https_pool.Secure | None = None,
    tls_port: int = 0,
    split: bool = True,
) -> dict[str, Any]:
    """The HTTPS server (its routes: the share endpoint on an issuer, then each route for
    its HTTPS names, then the secure entries'), and the loopback listener that relays
    certificates from an issuer; with secure entries, the permission endpoint and the
    keepers too."""
    routes = [r for _, f in secure for r in https.share_routes(f["body"], tokens.get(None))]
    for k, f in secure:
        body = {**f["body"], "hosts": https.names_of(f["body"])}
        handled = route(body, upstream_try, f.get("canary"), _source(k, f, config_dir))
        routes.append(https.hsts(handled, body))
    relay = [
        r
        for k, f in secure
        for r in https.relay_routes(
            f["body"],
            tokens.get(f["body"]["tls"].get("from")),
            https.root_file(k, f["body"], config_dir),
        )
    ]
    out: dict[str, Any] = {}
    if held:
        own = f"{{file.{config_dir}/{https.SHARE_TOKEN}}}"

        def proxied(i: int) -> list[dict[str, Any]]:
            return entry_handle(f"{config_dir}/{https_pool.ENTRY}{i}", upstream_try, split)

        routes += https_pool.tls_routes(held, config_dir, proxied, own)
        root = f"{config_dir}/{https_pool.ROOT_FILE}" if (held.acme or {}).get("root_pem") else None
        relay += https_pool.relay_routes(held, config_dir, tls_port, root)
        out["shipway-ask"] = _loopback(https_pool.ASK, https_pool.ask_routes(held, config_dir))
        out["shipway-keep"] = _loopback(https_pool.KEEP, https_pool.keeper_routes(held, config_dir))
    out["shipway-tls"] = {
        "listen": [f":{https.TLS_LISTEN}"],
        "automatic_https": {"disable": True},
        "tls_connection_policies": [{}],
        "routes": [*routes, UNKNOWN_HOST],
        "errors": {"routes": [RELEASE_DOWN]},
    }
    if relay:
        out["shipway-relay"] = _loopback(https.RELAY, relay)
    return out


def _loopback(listen: str, routes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"listen": [listen], "automatic_https": {"disable": True}, "routes": routes}


def admin_listen(config: bytes) -> str | None:
    """Where a composed config has its admin API (None: not such a config)."""
    try:
        data = json.loads(config)
    except ValueError:
        return None
    listen = (data.get("admin") or {}).get("listen") if isinstance(data, dict) else None
    return listen if isinstance(listen, str) and listen else None


def dumps(data: Any) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def _objects(tree: Mapping[str, tuple[bytes, int]], name: str) -> dict[str, dict[str, Any]]:
    """The JSON object of objects in file ``name`` of a proxy's files (keys as strings, the
    values that are not objects left out); none when the file is missing or not such."""
    raw = tree.get(name)
    if raw is None:
        return {}
    try:
        data = json.loads(raw[0])
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


def parse_parts(tree: Mapping[str, tuple[bytes, int]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each slot's applied route units in a shared proxy's files (``{"app/slot": {key:
    unit}}``: a slot that uses the proxy has a part, empty while it routes nothing yet);
    none when ``slots.json`` is missing or not such an object."""
    return {
        owner: {str(k): v for k, v in part.items() if isinstance(v, dict)}
        for owner, part in _objects(tree, PARTS_FILE).items()
    }


def tokens_of(tree: Mapping[str, tuple[bytes, int]]) -> dict[str | None, str]:
    """The share tokens in a proxy's files: its own (key None) and those of the issuers it
    gets certificates from (key: the issuer's address)."""
    out: dict[str | None, str] = {}
    for name, (content, _) in tree.items():
        if name == https.SHARE_TOKEN:
            out[None] = content.decode(errors="replace").strip()
        elif name.startswith("share-") and name.endswith(".token"):
            out[name[len("share-") : -len(".token")]] = content.decode(errors="replace").strip()
    return out


def parse_routes(tree: Mapping[str, tuple[bytes, int]]) -> dict[str, dict[str, Any]]:
    """The applied route units in a per-slot proxy's config files (``{path: (content,
    mode)}``); none when ``routes.json`` is missing or not an object of objects."""
    return _objects(tree, ROUTES_FILE)
