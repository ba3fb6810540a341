"""HTTPS declarations: a route's ``tls`` and a slot's ``acme``, ``proxy_tls_port``, ``hsts``.

A route asks for a certificate either from an ACME CA (``tls = "auto"``: the slot's
``acme`` directory, Let's Encrypt's production one unless said otherwise) or names the two
secrets that hold one (``tls = { cert = "SHOP_CERT", key = "SHOP_KEY" }``: entries of
``[secrets]``, resolved like every other secret, never shown). Docker slots serve both;
a Kubernetes route keeps ``tls_secret`` (the name of a TLS Secret in its namespace), which
a Docker slot refuses with the form to use instead.

What must never happen: a secret's value in an error, a plan or a record (only the names
of the secrets are kept); an ACME root that cannot be read taken as "no root".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipway.errors import InputError
from shipway.spec.check import Checker
from shipway.spec.limits import Unreadable, read_regular_file
from shipway.spec.locate import KeyPath
from shipway.spec.secrets import SecretRef

#: Let's Encrypt's production directory: what ``tls = "auto"`` uses unless ``acme`` says
LETS_ENCRYPT = "https://acme-v02.api.letsencrypt.org/directory"
DEFAULT_TLS_PORT = 443
#: the ``max-age`` of ``hsts = true``: one year, the value browsers' preload lists ask for
HSTS_MAX_AGE = 31536000
ACME_KEYS = ("directory", "root", "email", "profile")
SLOT_TLS_KEYS = ("acme", "proxy_tls_port", "hsts")
#: at most this many bytes of PEM for an ACME root (a bundle of a few certificates)
MAX_ROOT_BYTES = 256 * 1024
_URL = re.compile(r"^https://[^\s/]+(/\S*)?$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
_PROFILE = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class GivenCertificate:
    """A certificate and its key, each the value of a secret of ``[secrets]`` (PEM)."""

    cert: str
    key: str

    def to_json(self) -> dict[str, str]:
        return {"cert": self.cert, "key": self.key}


#: a route's ``tls``: ``"auto"`` (ACME) or a given certificate
RouteTls = str | GivenCertificate


@dataclass(frozen=True)
class Acme:
    """Where ``tls = "auto"`` certificates come from. ``root``: a PEM file (absolute path)
    of the CA certificates trusted for the directory's HTTPS and for the chain it issues
    (a private or staging CA; absent: the proxy's system roots); ``root_pem`` its content,
    read with the spec."""

    directory: str = LETS_ENCRYPT
    root: str | None = None
    email: str | None = None
    profile: str | None = None
    root_pem: str | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, str]:
        out = {"directory": self.directory}
        for key in ("root", "email", "profile"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def parse_route_tls(
    c: Checker, r: Mapping[str, Any], rpath: KeyPath, secrets: Mapping[str, SecretRef]
) -> RouteTls | None:
    """A route's ``tls``: ``"auto"`` or ``{ cert = "SECRET", key = "SECRET" }`` naming two
    declared secrets."""
    if "tls" not in r:
        return None
    raw, path = r["tls"], (*rpath, "tls")
    hint = 'use tls = "auto" (ACME) or tls = { cert = "CERT_SECRET", key = "KEY_SECRET" }'
    if "tls_secret" in r:
        c.error(path, "and tls_secret are both set", "keep one: tls_secret is Kubernetes'")
        return None
    if isinstance(raw, str):
        if raw != "auto":
            c.error(path, f"{raw!r} is not a tls mode", hint)
            return None
        return "auto"
    given = c.table(raw, path, ("cert", "key"))
    if given is None:
        return None
    names: dict[str, str] = {}
    for key in ("cert", "key"):
        if key not in given:
            c.error((*path, key), "is required", hint)
            continue
        name = c.string(given[key], (*path, key), hint="the name of a secret of [secrets]")
        if name is None:
            continue
        if name not in secrets:
            c.error(
                (*path, key),
                f"refers to secrets.{name}, which is not declared",
                f'declare it: [secrets] {name} = {{ from_file = "path/to/{key}.pem" }}',
            )
            continue
        names[key] = name
    if len(names) != 2:
        return None
    return GivenCertificate(cert=names["cert"], key=names["key"])


def parse_slot_tls(
    c: Checker, s: Mapping[str, Any], path: KeyPath, base_dir: Path, check_files: bool
) -> tuple[Acme | None, int | None, bool]:
    """A docker slot's ``acme``, ``proxy_tls_port`` and ``hsts``."""
    acme = _acme(c, s["acme"], (*path, "acme"), base_dir, check_files) if "acme" in s else None
    port = (
        c.integer(s["proxy_tls_port"], (*path, "proxy_tls_port"), "port")
        if "proxy_tls_port" in s
        else None
    )
    hsts = bool(c.boolean(s["hsts"], (*path, "hsts"))) if "hsts" in s else False
    return acme, port, hsts


def _acme(c: Checker, raw: Any, path: KeyPath, base_dir: Path, check_files: bool) -> Acme | None:
    t = c.table(raw, path, ACME_KEYS)
    if t is None:
        return None
    # each key: (its pattern, what it is, a hint)
    rules = {
        "directory": (_URL, "ACME directory URL",
                      'an https:// URL, e.g. "https://acme-staging-v02.api.letsencrypt.org/directory"'),
        "email": (_EMAIL, "email address", 'e.g. email = "ops@example.com"'),
        "profile": (_PROFILE, "ACME profile", 'a profile the CA offers, e.g. "shortlived"'),
    }  # fmt: skip
    found = {
        key: c.string(t[key], (*path, key), pattern=rule[0], what=rule[1], hint=rule[2])
        for key, rule in rules.items()
        if key in t
    }
    directory = found.get("directory", LETS_ENCRYPT if "directory" not in t else None)
    email, profile = found.get("email"), found.get("profile")
    root, pem = None, None
    if "root" in t:
        name = c.string(t["root"], (*path, "root"), hint="a PEM file, relative to the spec")
        if name is not None:
            root = str((base_dir / name).absolute())
            pem = _read_root(c, (*path, "root"), Path(root), name, check_files)
    if directory is None:
        return None
    return Acme(directory=directory, root=root, email=email, profile=profile, root_pem=pem)


def _read_root(c: Checker, path: KeyPath, file: Path, name: str, check_files: bool) -> str | None:
    try:
        text = read_regular_file(file, MAX_ROOT_BYTES).decode("ascii")
    except (Unreadable, UnicodeDecodeError) as exc:
        if check_files:
            c.error(path, f"{name}: {exc}", "name a readable PEM file, relative to the spec")
        return None
    if "-----BEGIN CERTIFICATE-----" not in text:
        if check_files:
            c.error(path, f"{name} holds no PEM certificate", "name the CA's root (PEM)")
        return None
    return text


def check_backend(c: Checker, backend: str, path: KeyPath, own: tuple[Any, ...] | None) -> None:
    """What a slot's backend serves of its own routes' TLS: docker serves ``tls`` and
    refuses Kubernetes' ``tls_secret``; the others refuse ``tls``. (The app's routes, which
    slots of several backends may share, are checked by the backend: :func:`refusal`.)"""
    for i, route in enumerate(own or ()):
        why = refusal(backend, route)
        if why is not None:
            key = "tls_secret" if backend == "docker" else "tls"
            c.error((*path, "routes", i, key), *why)


def refusal(backend: str, route: Any) -> tuple[str, str] | None:
    """Why ``backend`` cannot serve a route's TLS as declared (message, hint), or None."""
    if backend == "docker" and route.tls_secret:
        return (
            f"names a Kubernetes TLS Secret ({route.tls_secret}), which docker hosts do not have",
            'use tls = { cert = "CERT_SECRET", key = "KEY_SECRET" } (entries of [secrets]) '
            'or tls = "auto"',
        )
    if backend != "docker" and route.tls is not None:
        return (
            f"is served by docker slots only, not {backend} ones",
            "on kubernetes name a TLS Secret with tls_secret",
        )
    return None


def refuse_unserved(backend: str, routes: tuple[Any, ...], slot: str, spec_file: Any) -> None:
    """Raise InputError (exit 2) when the routes a slot serves (the app's, shared by slots
    of several backends) ask for TLS its backend cannot give, rather than serve them
    without it."""
    for route in routes:
        why = refusal(backend, route)
        if why is not None:
            raise InputError(
                f"{spec_file}: route {route.host} in slot {slot}: {why[0]} (hint: {why[1]})"
            )


def route_json(tls: RouteTls | None) -> Any:
    """A route's ``tls`` as the spec writes it (a snapshot)."""
    return tls.to_json() if isinstance(tls, GivenCertificate) else tls


def certificate_notes(routes: tuple[Any, ...], acme: Acme | None, hosts: list[str]) -> list[str]:
    """What the plan says of a docker slot's certificates: which names are requested from
    which CA, on which host, and which come from secrets."""
    auto = sorted({r.host for r in routes if r.tls == "auto"})
    given = sorted({r.host for r in routes if isinstance(r.tls, GivenCertificate)})
    out = []
    if auto:
        directory = (acme or Acme()).directory
        where = hosts[0] if hosts else "the first host"
        others = f"; {', '.join(hosts[1:])} get it from {where}" if len(hosts) > 1 else ""
        out.append(
            f"certificates: {', '.join(auto)} requested from {directory} (ACME HTTP-01, once, "
            f"by {where}{others}); renewed by the proxy before they expire"
        )
    for host in given:
        route = next(r for r in routes if r.host == host and isinstance(r.tls, GivenCertificate))
        out.append(f"certificate: {host} from secrets.{route.tls.cert} and secrets.{route.tls.key}")
    return out
