"""pytest plugin: a fault-injecting proxy in front of the test engines, driven by rules.

:class:`FaultProxy` sits on loopback between shipway and a real engine and decides, call by
call, to pass the call through or to break it the way real engines and networks break:

* ``status`` — answer with that HTTP status (and ``retry_after`` as ``Retry-After``)
  without forwarding: the engine never sees the call. The body is the engine's own error
  shape (a Kubernetes ``Status``; Docker's ``{"message": …}``);
* ``reset="before"`` — reset the connection (TCP RST) before forwarding anything;
* ``reset="after"`` — forward the call, wait for the engine's answer to start, then reset
  the connection: the call took effect, its answer is lost;
* ``delay`` — hold the call that long before doing the rest;
* ``cut_after`` — forward, then reset the connection that many seconds into the answer
  (a watch cut mid-stream);
* ``gone`` — answer a watch with one ``ERROR`` event carrying 410 Gone (its
  resourceVersion expired), then end the stream.

Rules match a call by method, a regular expression searched in its path, and one searched
in its query; each applies to ``times`` matching calls (None: all) after letting ``skip``
through. Without a matching rule, :meth:`FaultProxy.randomly` can break a share of all
calls with faults drawn from a seeded generator. Every call is logged
(:attr:`FaultProxy.calls`) with what was done to it and the engine's status.

How each engine is reached:

* **Kubernetes** (TLS): the proxy terminates TLS. It serves a certificate for 127.0.0.1
  from a CA of its own, made by :func:`make_ca` for the session (``cryptography``; neither
  the test CA's key nor the API server's is read), and connects upstream over TLS,
  verifying the API server against the CA of the admin kubeconfig and presenting that
  kubeconfig's client certificate. So calls through the proxy act as the test admin
  (``shipway-test-admin`` in the audit log); client credentials sent to the proxy are
  dropped. Terminating TLS is what lets rules see the method and path of each call; a
  TCP pass-through could only cut connections blindly.
* **Docker**: a unix socket in the test's temporary directory in front of host A's socket.

Each connection carries one call: the proxy rewrites ``Connection`` to ``close`` (except
for upgrades: exec and attach), so the answer ends with the connection and the next call
is a new one — a rule always sees every call.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import random
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import yaml

Flavour = Literal["kubernetes", "docker"]
Upstream = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]

REASONS = {
    409: "Conflict",
    410: "Gone",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}
PHRASES = {
    409: "Conflict",
    410: "Gone",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass
class Rule:
    """What to do to the calls it matches (see the module's doc)."""

    method: str | None = None
    path: str = ""
    query: str | None = None
    status: int | None = None
    retry_after: float | None = None
    delay: float = 0.0
    reset: Literal["before", "after"] | None = None
    cut_after: float | None = None
    gone: bool = False
    times: int | None = 1
    skip: int = 0
    seen: int = 0
    applied: int = 0

    def matches(self, call: Call) -> bool:
        if self.method is not None and call.method != self.method.upper():
            return False
        if self.path and not re.search(self.path, call.path):
            return False
        return self.query is None or bool(re.search(self.query, call.query))

    def describe(self) -> str:
        parts = []
        if self.delay:
            parts.append(f"delay {self.delay:g}s")
        if self.status:
            after = f" retry-after {self.retry_after:g}" if self.retry_after is not None else ""
            parts.append(f"{self.status}{after}")
        if self.reset:
            parts.append(f"reset {self.reset}")
        if self.cut_after is not None:
            parts.append(f"cut after {self.cut_after:g}s")
        if self.gone:
            parts.append("410 event")
        return ", ".join(parts) or "pass"


@dataclass
class Call:
    method: str
    path: str
    query: str
    fault: str | None = None
    upstream_status: int | None = None
    #: time.monotonic() when the proxy read it
    at: float = field(default_factory=time.monotonic)

    @property
    def watch(self) -> bool:
        return "watch=" in self.query or "/watch/" in self.path

    def __str__(self) -> str:
        what = f"{self.method} {self.path}{'?' + self.query if self.query else ''}"
        return what + (f" [{self.fault}]" if self.fault else "")


@dataclass
class RandomFaults:
    """Break ``rate`` of the calls no rule matched, with faults drawn (seeded) from the
    kinds that fit each call."""

    rate: float
    seed: int
    flavour: Flavour
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def draw(self, call: Call) -> Rule | None:
        if self.rng.random() >= self.rate:
            return None
        kinds: list[Rule] = [
            Rule(status=503),
            Rule(status=500),
            Rule(reset="before"),
            Rule(reset="after"),
            Rule(status=429, retry_after=round(self.rng.uniform(0.2, 1.0), 1)),
        ]
        if self.flavour == "kubernetes":
            kinds += [Rule(status=502), Rule(status=504)]
            if call.method == "PATCH":
                kinds.append(Rule(status=409))
            if call.watch:
                kinds += [Rule(gone=True), Rule(cut_after=round(self.rng.uniform(0.2, 2.0), 1))]
        return self.rng.choice(kinds)


class FaultProxy:
    """One proxy on its own event loop thread. Use :meth:`rule` / :meth:`randomly` to
    break calls, :attr:`calls` to see them."""

    def __init__(
        self,
        flavour: Flavour,
        upstream: Upstream,
        *,
        server_ssl: ssl.SSLContext | None = None,
        unix_path: Path | None = None,
    ) -> None:
        self.flavour = flavour
        self.upstream = upstream
        self.server_ssl = server_ssl
        self.unix_path = unix_path
        self.port = 0
        self.rules: list[Rule] = []
        self.calls: list[Call] = []
        self.random: RandomFaults | None = None
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._upstreams: set[asyncio.StreamWriter] = set()

    # -- the test's side -----------------------------------------------------------

    def rule(self, **kwargs: object) -> Rule:
        made = Rule(**kwargs)  # type: ignore[arg-type]
        with self._lock:
            self.rules.append(made)
        return made

    def randomly(self, rate: float, seed: int) -> RandomFaults:
        with self._lock:
            self.random = RandomFaults(rate, seed, self.flavour)
            return self.random

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()
            self.random = None

    def reset_log(self) -> None:
        with self._lock:
            self.calls.clear()

    def faults(self) -> list[Call]:
        """The calls that were broken, in order."""
        with self._lock:
            return [c for c in self.calls if c.fault]

    def log(self) -> str:
        with self._lock:
            return "\n".join(str(c) for c in self.calls)

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            # cut every connection, both sides: each handler then ends by itself
            for writer in list(self._connections) + list(self._upstreams):
                writer.transport.abort()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            _, pending = await asyncio.wait(others, timeout=5) if others else (set(), set())
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    # -- the proxy -----------------------------------------------------------------

    async def _serve(self) -> None:
        if self.unix_path is not None:
            self._server = await asyncio.start_unix_server(self._handle, path=str(self.unix_path))
        else:
            self._server = await asyncio.start_server(
                self._handle, "127.0.0.1", 0, ssl=self.server_ssl
            )
            self.port = self._server.sockets[0].getsockname()[1]

    def _choose(self, call: Call) -> Rule | None:
        with self._lock:
            self.calls.append(call)
            for rule in self.rules:
                if not rule.matches(call):
                    continue
                rule.seen += 1
                if rule.seen <= rule.skip:
                    return None
                if rule.times is not None and rule.applied >= rule.times:
                    continue
                rule.applied += 1
                return rule
            return self.random.draw(call) if self.random is not None else None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            await self._one_call(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away, or sent no request
        except ssl.SSLError:
            pass
        finally:
            self._connections.discard(writer)
            if not writer.is_closing():
                writer.close()

    async def _one_call(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, _ = line.split(" ", 2)
        path, _, query = target.partition("?")
        call = Call(method.upper(), path, query)
        rule = self._choose(call)
        if rule is not None:
            call.fault = rule.describe()
            if rule.delay:
                await asyncio.sleep(rule.delay)
            if rule.reset == "before":
                _reset(writer)
                return
            if rule.status:
                writer.write(self._error_answer(rule.status, rule.retry_after, call))
                await writer.drain()
                return
            if rule.gone:
                writer.write(_gone_answer())
                await writer.drain()
                return
        up_reader, up_writer = await self.upstream()
        self._upstreams.add(up_writer)
        try:
            up_writer.write(self._forwarded(header_lines, line))
            await up_writer.drain()
            await self._relay(reader, writer, up_reader, up_writer, rule, call)
        finally:
            self._upstreams.discard(up_writer)
            up_writer.transport.abort()

    def _forwarded(self, header_lines: list[str], line: str) -> bytes:
        headers = [h for h in header_lines if h]
        upgrade = any(h.lower().startswith("upgrade:") for h in headers)
        kept = []
        for h in headers:
            name = h.split(":", 1)[0].strip().lower()
            if name in ("keep-alive", "proxy-connection") or (name == "connection" and not upgrade):
                continue
            if name == "authorization" and self.flavour == "kubernetes":
                continue  # upstream, the proxy's own client certificate authenticates
            kept.append(h)
        if not upgrade:
            kept.append("Connection: close")
        return ("\r\n".join([line, *kept]) + "\r\n\r\n").encode("latin-1")

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        rule: Rule | None,
        call: Call,
    ) -> None:
        async def upward() -> None:
            while chunk := await reader.read(65536):
                up_writer.write(chunk)
                await up_writer.drain()

        async def downward() -> None:
            loop = asyncio.get_running_loop()
            cut = rule.cut_after if rule is not None else None
            cut_at = loop.time() + cut if cut is not None else None
            first = True
            while True:
                timeout = None if cut_at is None else max(0.0, cut_at - loop.time())
                try:
                    chunk = await asyncio.wait_for(up_reader.read(65536), timeout)
                except TimeoutError:
                    _reset(writer)  # cut mid-answer
                    return
                if not chunk:
                    return
                if first:
                    first = False
                    status = chunk.split(b"\r\n", 1)[0].split(b" ")
                    if len(status) > 1 and status[1].isdigit():
                        call.upstream_status = int(status[1])
                    if rule is not None and rule.reset == "after":
                        _reset(writer)  # the engine acted; its answer is lost
                        return
                writer.write(chunk)
                await writer.drain()

        up = asyncio.ensure_future(upward())
        try:
            await downward()
        finally:
            up.cancel()
            await asyncio.gather(up, return_exceptions=True)
            if not writer.is_closing():
                await writer.drain()

    def _error_answer(self, status: int, retry_after: float | None, call: Call) -> bytes:
        message = f"injected by the fault proxy: {status} for {call.method} {call.path}"
        if self.flavour == "kubernetes":
            body = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": REASONS.get(status, "InternalError"),
                "code": status,
            }
        else:
            body = {"message": message}
        data = json.dumps(body).encode()
        headers = [
            f"HTTP/1.1 {status} {PHRASES.get(status, 'Error')}",
            "Content-Type: application/json",
            f"Content-Length: {len(data)}",
            "Connection: close",
        ]
        if retry_after is not None:
            headers.append(f"Retry-After: {retry_after:g}")
        return ("\r\n".join(headers) + "\r\n\r\n").encode() + data


def _gone_answer() -> bytes:
    event = {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "injected by the fault proxy: too old resource version",
            "reason": "Expired",
            "code": 410,
        },
    }
    line = json.dumps(event).encode() + b"\n"
    chunk = f"{len(line):x}\r\n".encode() + line + b"\r\n0\r\n\r\n"
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + chunk


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a dropped connection looks to a client."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


# -- TLS for the Kubernetes proxy -------------------------------------------------------


@dataclass(frozen=True)
class ProxyCA:
    """A CA made for the test session, and a server certificate for 127.0.0.1 it signed."""

    ca_pem: bytes
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def make_ca(directory: Path) -> ProxyCA:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "shipway fault proxy CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = directory / "proxy.crt", directory / "proxy.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.touch(mode=0o600)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ProxyCA(ca.public_bytes(serialization.Encoding.PEM), cert_file, key_file)


@dataclass(frozen=True)
class Upstream_:
    """Where the Kubernetes proxy forwards to, and how it authenticates there."""

    host: str
    port: int
    context: ssl.SSLContext


def kubernetes_upstream(admin_kubeconfig: Path, directory: Path) -> Upstream_:
    """The API server of ``admin_kubeconfig``, reached over TLS with its CA and its client
    certificate (written, 0600, under ``directory`` for ``ssl``)."""
    config = yaml.safe_load(admin_kubeconfig.read_text())
    context_name = config.get("current-context")
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    server = cluster["server"].removeprefix("https://")
    host, _, port = server.partition(":")
    ssl_context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "upstream.crt", directory / "upstream.key"
    for path, name in ((cert, "client-certificate-data"), (key, "client-key-data")):
        path.touch(mode=0o600)
        path.write_bytes(base64.b64decode(user[name]))
    ssl_context.load_cert_chain(cert, key)
    return Upstream_(host, int(port or 443), ssl_context)


def proxy_kubeconfig(path: Path, port: int, ca: ProxyCA) -> Path:
    """A kubeconfig for shipway that reaches the cluster through the proxy."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "fault-proxy",
                "cluster": {
                    "server": f"https://127.0.0.1:{port}",
                    "certificate-authority-data": base64.b64encode(ca.ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "fault-proxy", "user": {}}],
        "contexts": [
            {"name": "fault-proxy", "context": {"cluster": "fault-proxy", "user": "fault-proxy"}}
        ],
        "current-context": "fault-proxy",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def kubernetes_proxy(admin_kubeconfig: Path, directory: Path) -> tuple[FaultProxy, Path]:
    """A started proxy in front of the test control plane, and a kubeconfig through it."""
    upstream = kubernetes_upstream(admin_kubeconfig, directory)
    ca = make_ca(directory)

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(
            upstream.host, upstream.port, ssl=upstream.context, server_hostname=upstream.host
        )

    proxy = FaultProxy("kubernetes", connect, server_ssl=ca.server_context()).start()
    return proxy, proxy_kubeconfig(directory / "kubeconfig", proxy.port, ca)


def docker_proxy(
    upstream_socket: str, directory: Path, name: str = "faulty"
) -> tuple[FaultProxy, str]:
    """A started proxy in front of a Docker engine's unix socket, and its ``unix://`` URL
    (``<name>.sock``: shipway names the host ``name``)."""
    target = upstream_socket.removeprefix("unix://")

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_unix_connection(target)

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.sock"
    proxy = FaultProxy("docker", connect, unix_path=path).start()
    return proxy, f"unix://{path}"


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def k8s_faults(k8s_kubeconfig: Path, tmp_path: Path) -> Iterator[tuple[FaultProxy, Path]]:
    """A fault proxy in front of the test control plane, and a kubeconfig through it."""
    proxy, kubeconfig = kubernetes_proxy(k8s_kubeconfig, tmp_path / "fault-proxy")
    try:
        yield proxy, kubeconfig
    finally:
        proxy.stop()


def summary(calls: Sequence[Call]) -> str:
    return "\n".join(str(c) for c in calls)


#: every exit code the README's table documents (0 ok … 12 no-anchor, 130/143 signals)
DOCUMENTED_EXIT_CODES = frozenset({0, 1, 2, 3, 4, 5, 10, 11, 12, 130, 143})
