"""HTTPS names that come and go without a reload: the shared proxy's *secure entries*. PURE.

A route of HTTPS names (ACME ones, ``tls = "auto"``, with the proxy's ACME settings, and
given ones) whose containers carry one release alias takes one secure entry per name, as a
plain route takes host-name entries (:mod:`.caddy`, *pool*).
Entry N's files, read by Caddy at each request or handshake:

``secure-N.host``   the name (:data:`~.entries.UNUSED` while free);
``secure-N.up``     the release alias it goes to, ``secure-N.port`` the port;
``secure-N.issue``  ``1`` on the host that orders the name's certificate (the issuer);
``secure-N.from``   the issuer's address on the other hosts (else empty);
``secure-N.store``  where the issuer's storage keeps the certificate (without ``.crt``);
``secure-N.given``  a given certificate's: the stem of its files (``…crt``, ``…key``, 0600,
                    written by the route step from its secrets);
``secure-N.hsts``   ``1`` when the route asks for HSTS;
``secure-N.keep``   what the entry's keeper dials: the proxy's own HTTPS port on the
                    issuer, else :data:`IDLE`.

The config holds, once, for every entry (nothing in it names a host name):

* on the HTTP port: the ACME challenge forwarded to the issuer (``from`` set), then the
  redirect to HTTPS;
* on the HTTPS port: the certificate shared with the token's holders (``issue`` set), the
  HSTS header (``hsts`` set), the route to the alias;
* a loopback *relay* asked by Caddy's ``get_certificate`` at each handshake: ``204`` for a
  name this host orders (Caddy then orders it on demand), the issuer's certificate for one
  it does not (fetched over verified TLS for that name, which makes the issuer order it if
  it has not yet), a given certificate's from its files, ``404`` for any other name (the
  handshake fails);
* a loopback *permission* endpoint for on-demand issuance: ``200`` only for a name whose
  entry says ``issue``: no other name is ever ordered;
* a loopback *keeper* per entry: an active health check that shakes hands with the proxy
  itself for the entry's name every :data:`KEEP_INTERVAL` (no connection kept, so each
  check is a handshake; its request, :data:`KEEP_PATH`, is answered by the proxy, never
  by the app): the certificate is ordered within that time of the name's arrival, and
  renewed in its renewal window (Caddy renews an on-demand certificate at a handshake)
  though no client comes.

The TLS app then has one policy for them all: the relay, then on-demand orders with the
proxy's ACME settings (none while it has none). HTTPS names with other ACME settings, or
of a route with a canary that cannot split entries or with no single alias, stay in the
config itself (:mod:`.https`), as before: their arrival and departure reload. A route's
plain names beside its HTTPS ones take host-name entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from shipway.backends.docker import caddy_canary, https
from shipway.backends.docker.entries import UNUSED, line, place, port_of, table_of
from shipway.backends.docker.entries import table as entry_table

ENTRY = "secure-"
#: the secure entries in a proxy's first config that serves HTTPS (doubled when full)
SIZE = 16
#: the loopback listeners of the permission endpoint and of the keepers
ASK = "127.0.0.1:2081"
KEEP = "127.0.0.1:2082"
#: what a free entry's keeper dials: a port nothing listens on (refused, not logged)
IDLE = "127.0.0.1:1"
KEEP_INTERVAL = https.RENEW_CHECK
#: what a keeper asks for: answered by the proxy itself (204), never by the app
KEEP_PATH = "/.well-known/shipway/keep"
#: the logger of the keepers' checks, left out of the proxy's log
KEEP_LOGGER = "http.handlers.reverse_proxy.health_checker.active"


class Secure(NamedTuple):
    """A shared proxy's secure entries: how many its config holds, which route
    (``"app/slot key"``) and name each taken one serves, the proxy's ACME settings (the
    first pooled ACME route's; None before any), and whether its config holds the entries
    (from the first HTTPS route on, or the proxy's making for one: never taken out)."""

    size: int
    entries: Mapping[int, tuple[str, str]]
    acme: Mapping[str, Any] | None
    on: bool = False


def names_of(tls: Mapping[str, Any]) -> dict[str, int | None]:
    """A route's HTTPS names: each ACME one (None) or given one (the index of its
    certificate in ``given``), in order."""
    out: dict[str, int | None] = dict.fromkeys(tls.get("auto") or [])
    for i, given in enumerate(tls.get("given") or []):
        out |= {str(h): i for h in given["hosts"] if h not in out}
    return out


def pooled(unit: Mapping[str, Any], acme: Mapping[str, Any] | None) -> bool:
    """Whether a route unit's HTTPS names take secure entries (its plain ones take the
    host-name pool's: :func:`.caddy.pooled`): one alias, a canary beside it only if it
    splits entries (:func:`.caddy_canary.in_entries`), and for ACME names the proxy's ACME
    settings (any, while the proxy has none)."""
    body = unit.get("body") or {}
    tls = body.get("tls") or {}
    names = names_of(tls)
    if not (names and unit.get("group") and body.get("upstreams")):
        return False
    if not caddy_canary.in_entries(unit):
        return False
    return not tls.get("auto") or acme is None or dict(tls.get("acme") or {}) == dict(acme)


def of(raw: Mapping[str, Any]) -> Secure:
    """The secure entries ``pool.json``'s ``secure`` says (none: an empty pool)."""
    try:
        size, entries = table_of(raw, SIZE)
        acme = dict(raw["acme"]) if isinstance(raw.get("acme"), dict) else None
        return Secure(size, entries, acme, bool(raw.get("on", acme is not None or entries)))
    except (ValueError, TypeError, AttributeError):
        return Secure(SIZE, {}, None)


def table(secure: Secure) -> dict[str, Any]:
    """What ``pool.json`` keeps of them (:func:`of` reads it back)."""
    out = entry_table(secure.size, secure.entries)
    if secure.acme is not None:
        out["acme"] = dict(secure.acme)
    if secure.on:
        out["on"] = True
    return out


def assign(routes: Mapping[str, Mapping[str, Any]], previous: Secure) -> Secure:
    """The secure entries for ``routes``, as :func:`.caddy.assign` does the host-name
    entries: a name kept keeps its place, a new one takes the lowest place free before,
    the size doubles while that is not enough. The ACME settings are the previous ones, or
    the first pooled route's; they stay once set (a change of them is a reload)."""
    acme = previous.acme
    if acme is None:
        acme_routes = (u for _, u in sorted(routes.items()) if u["body"].get("tls", {}).get("auto"))
        first = next((u for u in acme_routes if pooled(u, None)), None)
        acme = dict(first["body"]["tls"].get("acme") or {}) if first else None
    wanted = [
        (key, str(name))
        for key, unit in sorted(routes.items())
        if pooled(unit, acme)
        for name in names_of(unit["body"]["tls"])
    ]
    entries, size = place(wanted, previous.entries, previous.size)
    on = previous.on or bool(entries) or acme is not None
    return Secure(size, entries, acme, on)


def files(
    routes: Mapping[str, Mapping[str, Any]],
    secure: Secure,
    tokens: Mapping[str | None, str],
) -> dict[str, tuple[bytes, int]]:
    """The entries' files, in the order to write them: the names of entries freed first,
    then what every entry goes to, then the names of entries taken. ``tokens``: the share
    tokens this proxy holds (its own under None, an issuer's under its address): an
    entry's ``secure-N.token`` is its issuer's (0600; empty on the issuer)."""
    freed: dict[str, tuple[bytes, int]] = {}
    targets: dict[str, tuple[bytes, int]] = {}
    names: dict[str, tuple[bytes, int]] = {}
    directory = str((secure.acme or {}).get("directory", ""))
    for i in range(secure.size):
        entry = secure.entries.get(i)
        unit = routes.get(entry[0]) if entry else None
        at = f"{ENTRY}{i}"
        what = dict.fromkeys(("up", "port", "issue", "from", "store", "given", "hsts"), "")
        what["keep"] = IDLE
        if entry is None or unit is None:
            freed[f"{at}.host"] = line(UNUSED)
        else:
            name, body = entry[1], unit["body"]
            tls = body["tls"]
            names[f"{at}.host"] = line(name)
            what |= {"up": str(unit["group"]), "port": port_of(body)}
            what["hsts"] = "1" if tls.get("hsts") else ""
            given = names_of(tls).get(name)
            if given is not None:  # the files the route step wrote from its secrets
                what["given"] = https.file_of(f"{entry[0]} {given}", "")
            elif tls.get("from"):
                what["from"] = str(tls["from"])
            else:
                what["issue"] = "1"
                what["store"] = https.storage_key(directory, name, "crt").removesuffix(".crt")
                what["keep"] = f"127.0.0.1:{https.TLS_LISTEN}"
        targets |= {f"{at}.{k}": line(v) for k, v in what.items()}
        split, switch = caddy_canary.entry_files(at, (unit or {}).get("canary"))
        targets |= split
        (names if switch[f"{at}.id"][0] else freed).update(switch)
        token = tokens.get(what["from"]) if what["from"] else None
        targets[f"{at}.token"] = (token.encode() if token else b""), 0o600
    return {**freed, **targets, **names}


def aliases(key: str, secure: Secure, tree: Mapping[str, tuple[bytes, int]]) -> list[str]:
    """What the secure entries of the route ``key`` (``"app/slot key"``) go to, as
    written (none: the route takes none)."""
    held = sorted(i for i, (k, _) in secure.entries.items() if k == key)
    return [tree.get(f"{ENTRY}{i}.up", (b"", 0))[0].decode(errors="replace").strip() for i in held]


def _file(config_dir: str, i: int, what: str) -> str:
    return f"{{file.{config_dir}/{ENTRY}{i}.{what}}}"


def _is(config_dir: str, i: int, what: str) -> dict[str, Any]:
    return {"vars": {_file(config_dir, i, what): ["1"]}}


def _entry(match: dict[str, Any], routes: list[dict[str, Any]]) -> dict[str, Any]:
    """Entry N's routes behind one match of its name: a request for another name reads
    one file of this entry, not one per route."""
    return {"match": [match], "handle": [{"handler": "subroute", "routes": routes}]}


def http_routes(secure: Secure, config_dir: str, http_port: int, tls_port: int) -> list[Any]:
    """On the HTTP port, per entry: the ACME challenge to the issuer, then the redirect."""
    out: list[dict[str, Any]] = []
    for i in range(secure.size):
        elsewhere = {"not": [{"vars": {_file(config_dir, i, "from"): [""]}}]}
        challenge = {
            "match": [{"path": ["/.well-known/acme-challenge/*"], **elsewhere}],
            "handle": [
                {
                    "handler": "reverse_proxy",
                    "upstreams": [{"dial": f"{_file(config_dir, i, 'from')}:{http_port}"}],
                }
            ],
            "terminal": True,
        }
        redirect = {"handle": [https.redirect(tls_port)], "terminal": True}
        out.append(_entry({"host": [_file(config_dir, i, "host")]}, [challenge, redirect]))
    return out


def tls_routes(
    secure: Secure, config_dir: str, proxied: Any, share_token: str
) -> list[dict[str, Any]]:
    """On the HTTPS port: the keepers' request answered, then per entry: the certificate
    shared (on the issuer), the HSTS header, the route to its alias (``proxied(i)``: the
    entry's handlers, its canary's split too)."""
    keep = {"path": [KEEP_PATH], "remote_ip": {"ranges": ["127.0.0.1/32"]}}
    out: list[dict[str, Any]] = [
        {
            "match": [keep],
            "handle": [{"handler": "static_response", "status_code": 204}],
            "terminal": True,
        }
    ]
    for i in range(secure.size):
        share = {
            "path": [https.SHARE_PATH],
            "header": {"Authorization": [f"Bearer {share_token}"]},
            **_is(config_dir, i, "issue"),
        }
        read = _read("store", ".crt", ".key")
        shared = {
            "match": [share],
            "handle": [
                {"handler": "vars", "store": _file(config_dir, i, "store")},
                {"handler": "templates", "file_root": https.STORAGE},
                {
                    "handler": "static_response",
                    "headers": {"Content-Type": ["text/plain"], "Cache-Control": ["no-store"]},
                    "body": read,
                },
            ],
            "terminal": True,
        }
        header = {"Strict-Transport-Security": [https.HSTS]}
        hsts = {
            "match": [_is(config_dir, i, "hsts")],
            "handle": [{"handler": "headers", "response": {"set": header}}],
        }
        routes: list[dict[str, Any]] = [shared, hsts, {"handle": proxied(i), "terminal": True}]
        out.append(_entry({"host": [_file(config_dir, i, "host")]}, routes))
    return out


def relay_routes(
    secure: Secure, config_dir: str, tls_port: int, root: str | None
) -> list[dict[str, Any]]:
    """On the loopback relay, per entry: 204 where this host orders the name, the
    issuer's certificate where it does not; then 404 for any other name."""
    out: list[dict[str, Any]] = []
    for i in range(secure.size):
        kinds: list[dict[str, Any]] = []
        kinds.append(
            {
                "match": [_is(config_dir, i, "issue")],
                "handle": [{"handler": "static_response", "status_code": 204}],
                "terminal": True,
            }
        )
        given = {"not": [{"vars": {_file(config_dir, i, "given"): [""]}}]}
        kinds.append(
            {
                "match": [given],
                "handle": [
                    {"handler": "vars", "given": _file(config_dir, i, "given")},
                    {"handler": "templates", "file_root": config_dir},
                    {"handler": "static_response", "body": _read("given", "crt", "key")},
                ],
                "terminal": True,
            }
        )
        transport: dict[str, Any] = {"protocol": "http", "tls": {"server_name": "{http.vars.sni}"}}
        if root:
            transport["tls"]["root_ca_pem_files"] = [root]
        kinds.append(
            {
                "match": [{"not": [{"vars": {_file(config_dir, i, "from"): [""]}}]}],
                "handle": [
                    {"handler": "vars", "sni": "{http.request.uri.query.server_name}"},
                    {"handler": "rewrite", "uri": https.SHARE_PATH},
                    {
                        "handler": "reverse_proxy",
                        "upstreams": [{"dial": f"{_file(config_dir, i, 'from')}:{tls_port}"}],
                        "transport": transport,
                        "headers": {
                            "request": {
                                "set": {
                                    "Host": ["{http.vars.sni}"],
                                    "Authorization": [f"Bearer {_file(config_dir, i, 'token')}"],
                                }
                            }
                        },
                    },
                ],
                "terminal": True,
            }
        )
        out.append(_entry({"query": {"server_name": [_file(config_dir, i, "host")]}}, kinds))
    return [*out, _status(404)]


def _read(var: str, *suffixes: str) -> str:
    """A template that gives the files named by the request variable ``var`` and each of
    ``suffixes``, one after another (the ``templates`` handler cannot read ``{file.*}``:
    a ``vars`` handler puts the name in ``var`` first)."""
    return "".join(
        f'{{{{readFile (printf "%s{s}" (placeholder "http.vars.{var}"))}}}}' for s in suffixes
    )


def ask_routes(secure: Secure, config_dir: str) -> list[dict[str, Any]]:
    """The permission endpoint: 200 for a name an entry of this host orders, else 404."""
    out = [
        {
            "match": [
                {"query": {"domain": [_file(config_dir, i, "host")]}, **_is(config_dir, i, "issue")}
            ],
            "handle": [{"handler": "static_response", "status_code": 200}],
            "terminal": True,
        }
        for i in range(secure.size)
    ]
    return [*out, _status(404)]


def keeper_routes(secure: Secure, config_dir: str) -> list[dict[str, Any]]:
    """One route per entry whose reverse proxy's active health check shakes hands with the
    address in ``secure-N.keep`` for the entry's name (never asked for anything else)."""
    out = []
    for i in range(secure.size):
        name = _file(config_dir, i, "host")
        check: dict[str, Any] = {"uri": KEEP_PATH, "interval": KEEP_INTERVAL, "timeout": "10s"}
        check["headers"] = {"Host": [name]}
        out.append(
            {
                "handle": [
                    {
                        "handler": "reverse_proxy",
                        "upstreams": [{"dial": _file(config_dir, i, "keep")}],
                        "transport": {
                            "protocol": "http",
                            "tls": {"server_name": name, "insecure_skip_verify": True},
                            "keep_alive": {"enabled": False},
                        },
                        "health_checks": {"active": check},
                    }
                ],
                "terminal": True,
            }
        )
    return out


def policy(secure: Secure, config_dir: str, relay: str) -> dict[str, Any]:
    """The TLS app's policy for every entry: the relay first, then on-demand orders (with
    ACME settings only: given certificates alone order nothing)."""
    manager = {"get_certificate": [{"via": "http", "url": f"http://{relay}/"}]}
    if secure.acme is None:
        return manager
    issuer = https.acme_issuer(secure.acme, f"{config_dir}/{ROOT_FILE}")
    return {**manager, "issuers": [issuer], "on_demand": True}


#: the proxy's ACME root (its settings' ``root_pem``), what the pooled routes trust
ROOT_FILE = "secure-root.pem"


def root_files(secure: Secure) -> dict[str, tuple[bytes, int]]:
    """The file of the proxy's ACME root, when its settings have one."""
    pem = (secure.acme or {}).get("root_pem")
    return {ROOT_FILE: (str(pem).encode(), 0o644)} if pem else {}


def quiet(logging: Mapping[str, Any] | None) -> dict[str, Any]:
    """A config's ``logging`` with the keepers' checks left out of its default log."""
    logs = dict((logging or {}).get("logs") or {})
    default = dict(logs.get("default") or {})
    default["exclude"] = sorted({*default.get("exclude", []), KEEP_LOGGER})
    return {**(logging or {}), "logs": {**logs, "default": default}}


def permission() -> dict[str, Any]:
    return {"permission": {"module": "http", "endpoint": f"http://{ASK}/"}}


def _status(code: int) -> dict[str, Any]:
    return {"handle": [{"handler": "static_response", "status_code": code}]}
