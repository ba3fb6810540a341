"""The dashboard's HTTP server: the standard library's threading server, read-only.

* **Read-only.** GET and HEAD only; every other method is answered 405 (``Allow: GET,
  HEAD``), and no route changes anything: each one calls a read of the API.
* **Loopback by default.** Without a token the server listens on a loopback address only,
  and answers only requests whose ``Host`` names one (``127.0.0.1``, ``[::1]``,
  ``localhost``), so a web page elsewhere cannot read it through a rebound DNS name.
* **A token beyond loopback.** With ``--token``, every request must carry it: an
  ``Authorization: Bearer TOKEN`` header, or the cookie that the login link
  (``/?token=TOKEN``) sets, answered with a redirect to the same page without the token
  in its address. Compared in constant time (:func:`hmac.compare_digest`); never logged.

Routes (every JSON document is masked by :mod:`.reads`):

    /                                 the page (static/index.html)
    /static/NAME                      its CSS and JavaScript
    /api/overview                     every app and slot: state, live release, age, health
    /api/slot?app=A&slot=S            a slot's page
    /api/diff?app=A&slot=S&a=N&b=M    what differs between two releases of it
    /api/live[?app=A&slot=S]          server-sent events: the operations running now (every
                                      slot's, or one slot's), from the one event stream

``/api/live`` streams (``text/event-stream``) what :mod:`.live` reads from the files every
command writes on this machine (events/live.py): first a ``reset``, then each operation's
events as they are written, each masked like every other read; a comment every
:data:`KEEP_ALIVE` seconds while nothing happens. A HEAD gets its headers only. At most
:data:`MAX_STREAMS` streams at once (``503`` beyond: each holds a thread).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import mimetypes
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from shipway.dashboard.live import LiveTail, live_dirs, sse
from shipway.dashboard.reads import (
    Catalogue,
    NotFound,
    Overview,
    masked,
    release_diff,
    slot_page,
)
from shipway.errors import InputError

COOKIE = "shipway_dashboard"
#: the shortest token accepted: a token is the only lock on a page beyond loopback
MIN_TOKEN = 16
STATIC = ("index.html", "dashboard.css", "dashboard.js", "live.js")
#: how often a live stream reads the operations' files (seconds)
LIVE_EVERY = 0.2
#: a live stream says it is there this often while nothing happens (seconds)
KEEP_ALIVE = 15.0
#: live streams served at once
MAX_STREAMS = 32
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address, or ``localhost``) is this machine's loopback."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(listen: str, token: str | None) -> None:
    """Refuse a listen address beyond loopback without a token, and a short token."""
    if token is not None and len(token) < MIN_TOKEN:
        raise InputError(
            f"--token: a token of at least {MIN_TOKEN} characters, please (hint: "
            "python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )
    if token is None and not is_loopback(listen):
        raise InputError(
            f"--listen {listen}: listening beyond loopback serves every app's state to "
            "anyone who reaches this address; it needs a token that every request must "
            "carry (hint: --token TOKEN, or SHIPWAY_DASHBOARD_TOKEN in the environment)"
        )


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], catalogue: Catalogue, token: str | None = None
    ) -> None:
        check_listen(address[0], token)
        if ":" in address[0]:
            import socket

            self.address_family = socket.AF_INET6
        self.catalogue = catalogue
        self.overview = Overview(catalogue)
        self.token = token
        self.closing = threading.Event()
        self.streams = threading.BoundedSemaphore(MAX_STREAMS)
        super().__init__(address, Handler)

    def server_close(self) -> None:
        self.closing.set()  # the live streams end
        super().server_close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}/"


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "shipway-dashboard"
    sys_version = ""

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def __getattr__(self, name: str) -> Any:
        # POST, PUT, DELETE, PATCH, OPTIONS … and any method made up: 405, never 501
        if name.startswith("do_"):
            return self._refuse
        raise AttributeError(name)

    def _refuse(self) -> None:
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED,
            {"error": f"{self.command}: the dashboard is read-only (GET and HEAD only)"},
            body=True,
            extra={"Allow": "GET, HEAD"},
        )

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a request line may carry the login link's token."""

    # -- serving ---------------------------------------------------------------------

    def _serve(self, body: bool) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if not self._admitted(url.path, query, body):
            return
        route = self._routes().get(url.path)
        try:
            if url.path == "/api/live":
                self._live(query, body)
            elif route is not None:
                self._send(HTTPStatus.OK, route(query), body)
            elif url.path == "/":
                self._static("index.html", body)
            elif url.path.startswith("/static/") and url.path[8:] in STATIC:
                self._static(url.path[8:], body)
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no page {url.path}"}, body)
        except NotFound as exc:
            self._send(HTTPStatus.NOT_FOUND, {"error": str(exc)}, body)
        except InputError as exc:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc)}, body)
        except Exception as exc:
            mask = self.server.catalogue.masker()
            error = mask(f"{type(exc).__name__}: {exc}")
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": error}, body)

    def _routes(self) -> dict[str, Callable[[dict[str, str]], Any]]:
        catalogue = self.server.catalogue
        return {
            "/api/overview": lambda q: self.server.overview.get(),
            "/api/slot": lambda q: slot_page(catalogue, *_slot_of(q)),
            "/api/diff": lambda q: release_diff(
                catalogue, *_slot_of(q), _revision(q, "a"), _revision(q, "b")
            ),
        }

    def _live(self, query: dict[str, str], body: bool) -> None:
        """The operations running now, as server-sent events, until the page goes."""
        app, slot = query.get("app"), query.get("slot")
        if (app is None) != (slot is None):
            raise InputError("say which slot: ?app=APP&slot=SLOT, or neither for every slot")
        if not self.server.streams.acquire(blocking=False):
            busy = {"error": f"{MAX_STREAMS} live streams are open already"}
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, busy, body)
            return
        try:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            for name, value in SECURITY_HEADERS.items():
                self.send_header(name, value)
            self.end_headers()
            if body:
                self._stream(LiveTail(live_dirs(self.server.catalogue.state_dirs), app, slot))
        finally:
            self.server.streams.release()

    def _stream(self, tail: LiveTail) -> None:
        mask = self.server.catalogue.masker()
        closing = self.server.closing
        try:
            self._write(b"retry: 2000\n" + sse({}, "reset"))
            said = time.monotonic()
            while not closing.is_set():
                messages = tail.read()
                if messages:
                    self._write(b"".join(sse(masked(m, mask)) for m in messages))
                    said = time.monotonic()
                elif time.monotonic() - said >= KEEP_ALIVE:
                    self._write(b": still here\n\n")
                    said = time.monotonic()
                closing.wait(LIVE_EVERY)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            return  # the page went away

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def _admitted(self, path: str, query: dict[str, str], body: bool) -> bool:
        token = self.server.token
        if token is None:
            if is_loopback(_host_of(self.headers.get("Host") or "")):
                return True
            self._send(HTTPStatus.FORBIDDEN, {"error": "a loopback Host only"}, body)
            return False
        given = query.get("token")
        if given is not None and _same(given, token):
            # the login link: the cookie, then the same page without the token in its address
            self.send_response(HTTPStatus.SEE_OTHER)
            self.send_header("Set-Cookie", f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")
            self.send_header("Location", path)
            self.send_header("Content-Length", "0")
            for name, value in SECURITY_HEADERS.items():
                self.send_header(name, value)
            self.end_headers()
            return False
        if any(_same(candidate, token) for candidate in self._tokens()):
            return True
        self._send(
            HTTPStatus.UNAUTHORIZED,
            {"error": "this dashboard needs its token: open its login link (/?token=TOKEN) "
             "or send Authorization: Bearer TOKEN"},
            body,
            extra={"WWW-Authenticate": 'Bearer realm="shipway dashboard"'},
        )  # fmt: skip
        return False

    def _tokens(self) -> list[str]:
        found = []
        auth = self.headers.get("Authorization") or ""
        if auth.lower().startswith("bearer "):
            found.append(auth[7:].strip())
        try:
            cookie = SimpleCookie(self.headers.get("Cookie") or "")
        except CookieError:
            cookie = SimpleCookie()
        if COOKIE in cookie:
            found.append(cookie[COOKIE].value)
        return found

    def _static(self, name: str, body: bool) -> None:
        data = resources.files("shipway.dashboard").joinpath("static", name).read_bytes()
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        self._reply(HTTPStatus.OK, data, f"{kind}; charset=utf-8", body)

    def _send(
        self, code: HTTPStatus, doc: Any, body: bool, extra: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(doc, default=str).encode()
        self._reply(code, data, "application/json", body, extra)

    def _reply(
        self,
        code: HTTPStatus,
        data: bytes,
        kind: str,
        body: bool,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)


def _host_of(header: str) -> str:
    """The host of a ``Host`` header: ``[::1]:8000`` → ``::1``, ``localhost:8000`` →
    ``localhost``."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.split(":", 1)[0]


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(), token.encode())


def _slot_of(query: dict[str, str]) -> tuple[str, str]:
    app, slot = query.get("app"), query.get("slot")
    if not app or not slot:
        raise InputError("say which slot: ?app=APP&slot=SLOT")
    return app, slot


def _revision(query: dict[str, str], key: str) -> int:
    try:
        return int(query.get(key, ""))
    except ValueError:
        raise InputError(f"{key}: a revision number, please") from None
