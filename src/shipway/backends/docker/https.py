"""HTTPS on a host's shared proxy: what a route unit says of its certificates, and the
Caddy config it adds. PURE.

A certificate is issued ONCE per host name, however many hosts serve it. The slot's first
host that serves routes (its *issuer*) orders it from the ACME CA (HTTP-01) and renews it,
with Caddy's own automation; every other host of the slot

* forwards ``/.well-known/acme-challenge/`` for those names to the issuer's HTTP port, so
  the CA's check succeeds whichever host the name's DNS points it at;
* gets the certificate (and its key) from the issuer at TLS handshake time, through
  Caddy's ``get_certificate`` (``http``) manager: it asks a loopback-only listener of its
  own proxy, which fetches it from the issuer's HTTPS port over TLS (verified for that name
  against the ACME CA's roots) with the issuer's share token (a random secret in the
  issuer's proxy volume, copied to the others' volumes, never shown).

So a renewal on the issuer (no deploy needed: Caddy checks every :data:`RENEW_CHECK`) is
what every host serves from the next handshake on. Why not the others: forwarding the
challenge alone makes each host order its own certificate (N orders per renewal, against
the CA's duplicate-certificate limit); Caddy's shared storage needs a storage plugin that
``caddy:2`` does not have; shipway copying the files at deploy time would miss a renewal
between deploys.

What must never happen: a host other than the issuer ordering a certificate (its policy has
no issuer, only the manager, and the relay never answers 204, which would let Caddy order
one on demand); the key served to anyone without the token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from shipway.backends.docker.machines import HostAddress, addresses
from shipway.release.model import Release
from shipway.spec.model import App, Slot
from shipway.spec.secrets import placeholder
from shipway.spec.tls import HSTS_MAX_AGE, Acme, GivenCertificate

#: where Caddy keeps its certificates in the proxy (its ``XDG_DATA_HOME``: a volume)
DATA_DIR = "/data"
STORAGE = f"{DATA_DIR}/caddy"
#: the port the proxy serves HTTPS on inside its container (published as proxy_tls_port)
TLS_LISTEN = 443
#: the loopback-only listener of a non-issuing proxy that relays certificate fetches
RELAY = "127.0.0.1:2080"
#: the issuer's path that gives a name's certificate and key to the token's holders
SHARE_PATH = "/.well-known/shipway/certificate"
SHARE_TOKEN = "share.token"
#: how often Caddy looks for certificates to renew (its default is 10 minutes: too rare
#: for short-lived certificates). Caddy sets it when its certificate cache is made, at the
#: first config with a ``tls`` app, and keeps it: so a proxy that serves HTTPS has it from
#: its first config on (:func:`~.caddy.compose`)
RENEW_CHECK = "30s"
HSTS = f"max-age={HSTS_MAX_AGE}"


def issuer_of(app: App, slot: Slot) -> HostAddress | None:
    """The slot's first host that serves a route: the one that orders its certificates."""
    routed = {r.process for r in app.routes}
    for host in addresses(slot.hosts):
        if any(host.runs(p) for p in routed):
            return host
    return None


def acme_of(slot: Slot) -> dict[str, Any]:
    """The slot's ACME settings as its route bodies carry them (what a shared proxy's
    secure entries are ordered with)."""
    acme = slot.acme or Acme()
    pairs = (
        ("directory", acme.directory),
        ("email", acme.email),
        ("profile", acme.profile),
        ("root_pem", acme.root_pem),
    )
    return {k: v for k, v in pairs if v}


def https_of(
    app: App, slot: Slot, release: Release, issuer: HostAddress | None
) -> dict[str, dict[str, Any]]:
    """Process → what its route's body says of HTTPS (none for a process without TLS)."""
    out: dict[str, dict[str, Any]] = {}
    for route in app.routes:
        if route.tls is None:
            continue
        info = out.setdefault(
            route.process,
            {
                "auto": [],
                "given": [],
                "port": slot.proxy_tls_port or 443,
                "hsts": slot.hsts,
                "issuer": issuer.name if issuer else None,
                "from": issuer.hostname if issuer else None,
            },
        )
        if isinstance(route.tls, GivenCertificate):
            info["given"].append(
                {
                    "hosts": [route.host],
                    "cert": placeholder(route.tls.cert),
                    "key": placeholder(route.tls.key),
                }
            )
            info["config"] = release.config_hash  # a new certificate re-applies the route
        else:
            info["auto"].append(route.host)
            info["acme"] = acme_of(slot)
    for info in out.values():
        info["auto"] = sorted(set(info["auto"]))
    return out


def tls_of(info: Mapping[str, Any] | None, host: HostAddress) -> dict[str, Any]:
    """The ``tls`` of a route body on ``host`` (none without TLS): on a host other than
    the issuer, ``from`` says where its ACME certificates come from."""
    if not info:
        return {}
    body = {k: v for k, v in info.items() if k not in ("issuer", "from")}
    if info["auto"] and info["issuer"] != host.name:
        body["from"] = info["from"]
    return {"tls": body}


def tls_proxy_body(port: int, tls_port: int) -> dict[str, Any]:
    """What a shared proxy that serves HTTPS adds to its body: the published HTTPS port and
    the volume of its certificates."""
    return {"tls_port": tls_port, "data_volume": f"shipway-proxy-{port}-data"}


# -- the Caddy config -------------------------------------------------------------------


def names_of(body: Mapping[str, Any]) -> list[str]:
    """The host names a route body serves over HTTPS."""
    tls = body.get("tls") or {}
    given = [h for g in tls.get("given", []) for h in g["hosts"]]
    return sorted({*tls.get("auto", []), *given})


def file_of(owner_key: str, what: str) -> str:
    """The file (in the proxy's config directory) of a given certificate or key, or of an
    ACME root, for the route unit ``owner_key`` (``"app/slot key"``)."""
    return f"tls-{hashlib.sha256(owner_key.encode()).hexdigest()[:16]}.{what}"


def token_file(source: str | None) -> str:
    """The share token's file: the proxy's own, or the one of the issuer at ``source``."""
    return SHARE_TOKEN if source is None else f"share-{source}.token"


def storage_key(directory: str, name: str, what: str) -> str:
    """Where Caddy's file storage keeps a name's certificate (``crt``) or key (``key``)
    issued through ``directory`` (certmagic's issuer key and ``Safe`` rules)."""
    from urllib.parse import urlsplit

    url = urlsplit(directory)
    issuer = url.netloc
    path = url.path.replace("/", "-").replace("\\", "-").strip("-")
    if path:
        issuer += "-" + path

    def safe(text: str) -> str:
        text = text.lower().strip().replace(" ", "_").replace("+", "_plus_")
        text = text.replace("*", "wildcard_").replace(":", "-").replace("..", "")
        return "".join(ch for ch in text if ch.isalnum() or ch in "_@.-")

    return f"certificates/{safe(issuer)}/{safe(name)}/{safe(name)}.{what}"


def redirect(port: int) -> dict[str, Any]:
    where = "{http.request.host}" + ("" if port == 443 else f":{port}")
    return {
        "handler": "static_response",
        "status_code": 308,
        "headers": {"Location": [f"https://{where}{{http.request.uri}}"]},
    }


def http_routes(owner_key: str, body: Mapping[str, Any], http_port: int) -> list[dict[str, Any]]:
    """On the HTTP port: the ACME challenge forwarded to the issuer (on the other hosts),
    then every HTTPS name redirected to HTTPS."""
    tls, names = body["tls"], names_of(body)
    out: list[dict[str, Any]] = []
    if tls.get("from") and tls.get("auto"):
        out.append(
            {
                "match": [{"host": tls["auto"], "path": ["/.well-known/acme-challenge/*"]}],
                "handle": [
                    {
                        "handler": "reverse_proxy",
                        "upstreams": [{"dial": f"{tls['from']}:{http_port}"}],
                    }
                ],
                "terminal": True,
            }
        )
    out.append(
        {"match": [{"host": names}], "handle": [redirect(int(tls["port"]))], "terminal": True}
    )
    return out


def share_routes(body: Mapping[str, Any], token: str | None) -> list[dict[str, Any]]:
    """On the issuer's HTTPS port: each ACME name's certificate and key, to the holders of
    its share token only."""
    tls = body["tls"]
    if tls.get("from") or not tls.get("auto") or not token:
        return []
    directory = tls["acme"]["directory"]
    out = []
    for name in tls["auto"]:
        crt, key = storage_key(directory, name, "crt"), storage_key(directory, name, "key")
        out.append(
            {
                "match": [
                    {
                        "host": [name],
                        "path": [SHARE_PATH],
                        "header": {"Authorization": [f"Bearer {token}"]},
                    }
                ],
                "handle": [
                    {"handler": "templates", "file_root": STORAGE},
                    {
                        "handler": "static_response",
                        "headers": {"Content-Type": ["text/plain"], "Cache-Control": ["no-store"]},
                        "body": f'{{{{readFile "{crt}"}}}}{{{{readFile "{key}"}}}}',
                    },
                ],
                "terminal": True,
            }
        )
    return out


def relay_routes(
    body: Mapping[str, Any], token: str | None, root: str | None
) -> list[dict[str, Any]]:
    """On a non-issuing proxy's loopback listener: a handshake's fetch of a name's
    certificate, relayed to the issuer over verified TLS with its token."""
    tls = body["tls"]
    if not tls.get("from") or not tls.get("auto"):
        return []
    out = []
    for name in tls["auto"]:
        transport: dict[str, Any] = {"protocol": "http", "tls": {"server_name": name}}
        if root:
            transport["tls"]["root_ca_pem_files"] = [root]
        out.append(
            {
                "match": [{"query": {"server_name": [name]}}],
                "handle": [
                    {"handler": "rewrite", "uri": SHARE_PATH},
                    {
                        "handler": "reverse_proxy",
                        "upstreams": [{"dial": f"{tls['from']}:{tls['port']}"}],
                        "transport": transport,
                        "headers": {
                            "request": {
                                "set": {
                                    "Host": [name],
                                    "Authorization": [f"Bearer {token or 'none'}"],
                                }
                            }
                        },
                    },
                ],
                "terminal": True,
            }
        )
    return out


def hsts(route: dict[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """A route on the HTTPS port, with the HSTS header when the slot asks for it."""
    if not body["tls"].get("hsts"):
        return route
    header = {"handler": "headers", "response": {"set": {"Strict-Transport-Security": [HSTS]}}}
    return {**route, "handle": [header, *route["handle"]]}


def tls_app(units: Mapping[str, Mapping[str, Any]], config_dir: str) -> dict[str, Any]:
    """Caddy's ``tls`` app for every route unit with HTTPS (``"app/slot key"`` → unit)."""
    automate: list[str] = []
    files: list[dict[str, Any]] = []
    policies: list[dict[str, Any]] = []
    for owner_key, unit in units.items():
        tls = unit["body"].get("tls")
        if not tls:
            continue
        for i in range(len(tls.get("given", []))):
            stem = f"{config_dir}/{file_of(f'{owner_key} {i}', '')}"
            files.append({"certificate": f"{stem}crt", "key": f"{stem}key"})
        if not tls.get("auto"):
            continue
        if tls.get("from"):
            manager = {"via": "http", "url": f"http://{RELAY}/"}
            policies.append({"subjects": tls["auto"], "get_certificate": [manager]})
            continue
        automate += tls["auto"]
        acme = tls["acme"]
        issuer = acme_issuer(acme, f"{config_dir}/{file_of(owner_key, 'root.pem')}")
        policies.append({"subjects": tls["auto"], "issuers": [issuer]})
    certificates: dict[str, Any] = {}
    if automate:
        certificates["automate"] = sorted(set(automate))
    if files:
        certificates["load_files"] = files
    return {
        "certificates": certificates,
        "automation": {"policies": policies, "renew_interval": RENEW_CHECK},
    }


def acme_issuer(acme: Mapping[str, Any], root: str) -> dict[str, Any]:
    """Caddy's ACME issuer for a route's ACME settings (``root``: the file of its
    ``root_pem``, trusted when it has one), HTTP-01 only."""
    issuer: dict[str, Any] = {"module": "acme", "ca": acme.get("directory", "")}
    issuer |= {k: acme[k] for k in ("email", "profile") if k in acme}
    if acme.get("root_pem"):
        issuer["trusted_roots_pem_files"] = [root]
    issuer["challenges"] = {"tls-alpn": {"disabled": True}}
    return issuer


def root_file(owner_key: str, body: Mapping[str, Any], config_dir: str) -> str | None:
    """The ACME root's file of a route unit, if it has one."""
    acme = (body.get("tls") or {}).get("acme") or {}
    return f"{config_dir}/{file_of(owner_key, 'root.pem')}" if acme.get("root_pem") else None


def given_files(
    owner_key: str, body: Mapping[str, Any], secrets: Mapping[str, str] | None
) -> dict[str, tuple[bytes, int]]:
    """The files a route unit's given certificates and ACME root are written to in the
    proxy's config directory (``secrets``: the placeholders' values, revealed here only;
    None: the same files emptied, for a route that leaves the proxy, so no key outlives
    its route there)."""
    tls = body.get("tls") or {}

    def value(ref: str) -> bytes:
        return secrets[ref].encode() if secrets is not None else b""

    out: dict[str, tuple[bytes, int]] = {}
    for i, given in enumerate(tls.get("given", [])):
        stem = file_of(f"{owner_key} {i}", "")
        out[f"{stem}crt"] = (value(given["cert"]), 0o600)
        out[f"{stem}key"] = (value(given["key"]), 0o600)
    pem = (tls.get("acme") or {}).get("root_pem")
    if pem:
        out[file_of(owner_key, "root.pem")] = (pem.encode() if secrets is not None else b"", 0o644)
    return out
