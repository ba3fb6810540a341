"""HTTP/1.1 message heads and body framing, as the router needs them. PURE; standard
library only, because the router process loads it (and never imports shipway).

The router passes bodies through as they are framed on the wire (a chunked body stays
chunked, byte for byte), so all it must know of a message is its head and where its body
ends: :func:`read_request` and :func:`read_response` for the heads, :func:`request_head`
and :func:`response_head` for the heads it sends on, :class:`Body` for where a body ends
— the one framer of both paths (``relay.py`` feeds it what arrives, ``router.py`` reads
what it asks for). What must never happen here: a message whose end is ambiguous being
forwarded (two different ``Content-Length`` values, both ``Transfer-Encoding`` and
``Content-Length`` on a request, a chunk size that is not plain hex digits: the classic
request-smuggling shapes) — those are refused with a 400.
"""

from __future__ import annotations

from dataclasses import dataclass

#: headers that describe one connection, never forwarded (RFC 9110 7.6.1); a chunked body
#: keeps its ``Transfer-Encoding`` because the router forwards it still chunked
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
    }
)
IDEMPOTENT = frozenset({b"GET", b"HEAD", b"OPTIONS", b"PUT", b"DELETE", b"TRACE"})
REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


class BadMessage(Exception):
    """A message the router will not forward; ``status`` is the answer a client gets."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Head:
    """A request or status line and its header fields, in order (names as sent)."""

    first: bytes
    fields: list[tuple[bytes, bytes]]
    #: lowercased name -> value; repeated fields joined with ", "
    named: dict[bytes, bytes]

    def tokens(self, name: bytes) -> set[bytes]:
        """The comma-separated tokens of a field, lowercased (``Connection: keep-alive``)."""
        raw = self.named.get(name)
        return {t.strip().lower() for t in raw.split(b",")} if raw else set()


def parse_head(raw: bytes) -> Head:
    """``raw``: a head up to (not including) its blank line."""
    lines = raw.split(b"\r\n")
    first = lines[0]
    fields: list[tuple[bytes, bytes]] = []
    named: dict[bytes, bytes] = {}
    for line in lines[1:]:
        if not line:
            continue
        if line[0] in b" \t":
            raise BadMessage(400, "obsolete line folding in a header")
        name, sep, value = line.partition(b":")
        if not sep or not name or name.strip() != name:
            raise BadMessage(400, f"malformed header line {line[:40]!r}")
        value = value.strip(b" \t")
        fields.append((name, value))
        key = name.lower()
        held = named.get(key)
        named[key] = value if held is None else held + b", " + value
    return Head(first, fields, named)


#: how a body ends: ("none", 0) · ("length", n) · ("chunked", 0) · ("close", 0)
Framing = tuple[str, int]


def content_length(head: Head) -> int | None:
    raw = head.named.get(b"content-length")
    if raw is None:
        return None
    values = {v.strip() for v in raw.split(b",")}
    if len(values) != 1:
        raise BadMessage(400, "conflicting Content-Length values")
    value = values.pop()
    if not value.isdigit():
        raise BadMessage(400, f"invalid Content-Length {value[:20]!r}")
    return int(value)


def request_body(head: Head) -> Framing:
    """Where a request's body ends (RFC 9112 6.3): chunked, a length, or none."""
    te = head.named.get(b"transfer-encoding")
    if te is not None:
        if b"content-length" in head.named:
            raise BadMessage(400, "both Transfer-Encoding and Content-Length")
        if te.split(b",")[-1].strip().lower() != b"chunked":
            raise BadMessage(400, "a request's Transfer-Encoding must end in chunked")
        return ("chunked", 0)
    length = content_length(head)
    return ("length", length) if length else ("none", 0)


def response_body(head: Head, status: int, method: bytes) -> Framing:
    """Where a response's body ends: none (HEAD, 1xx, 204, 304), chunked, a length, or the
    connection's close."""
    if method == b"HEAD" or status < 200 or status in (204, 304):
        return ("none", 0)
    te = head.named.get(b"transfer-encoding")
    if te is not None:
        chunked = te.split(b",")[-1].strip().lower() == b"chunked"
        return ("chunked", 0) if chunked else ("close", 0)
    length = content_length(head)
    if length is None:
        return ("close", 0)
    return ("length", length) if length else ("none", 0)


HEX = frozenset(b"0123456789abcdefABCDEF")
#: the longest chunk-size or trailer line accepted
LINE_LIMIT = 64 * 1024


def chunk_size(line: bytes) -> int:
    """The size on a chunk-size line: hex digits only (RFC 9112 7.1: no sign, no ``0x``, no
    ``_``, which Python's ``int`` would take and an app's parser would not), extensions after
    ``;`` ignored."""
    raw = line.split(b";", 1)[0].rstrip(b"\r\n").rstrip(b" \t")
    if not raw or not HEX.issuperset(raw):
        raise BadMessage(400, f"invalid chunk size {raw[:20]!r}")
    return int(raw, 16)


class Body:
    """Where a message's body ends, found as its bytes pass (they pass unchanged: a chunked
    body stays chunked). Fed what arrives (:meth:`feed`), or asked how much a reader may
    take without reading past the body (:meth:`want`)."""

    __slots__ = ("done", "kind", "left", "line", "state")

    def __init__(self, framing: Framing) -> None:
        self.kind, self.left = framing
        self.state = "size"  # chunked: size · data · trailer
        self.line = bytearray()
        self.done = self.kind == "none" or (self.kind == "length" and not self.left)

    def want(self) -> int:
        """The most bytes to read next; 0: a line, up to its ``\n`` (a chunk's size line
        or a trailer line)."""
        if self.kind == "chunked":
            return self.left if self.state == "data" else 0
        return self.left if self.kind == "length" else LINE_LIMIT

    def feed(self, data: bytes) -> int:
        """How many bytes of ``data`` belong to the body: all of them, unless it ends
        inside ``data``."""
        kind = self.kind
        if kind == "length":
            take = min(self.left, len(data))
            self.left -= take
            self.done = not self.left
            return take
        if kind == "chunked":
            return self._chunks(data)
        return len(data) if kind == "close" else 0

    def _chunks(self, data: bytes) -> int:
        i, n = 0, len(data)
        while i < n and not self.done:
            if self.state == "data":  # the chunk's data and its CRLF
                take = min(self.left, n - i)
                i += take
                self.left -= take
                if not self.left:
                    self.state = "size"
                continue
            j = data.find(b"\n", i)
            if j < 0:
                self.line += data[i:]
                if len(self.line) > LINE_LIMIT:
                    raise BadMessage(400, "a chunk line too long")
                return n
            self.line += data[i : j + 1]
            i = j + 1
            line, self.line = bytes(self.line), bytearray()
            if self.state == "size":
                size = chunk_size(line)
                self.state, self.left = ("data", size + 2) if size else ("trailer", 0)
            elif line == b"\r\n":  # the blank line after the trailer fields
                self.done = True
        return i


def forwarded_fields(head: Head, keep: frozenset[bytes] = frozenset()) -> list[bytes]:
    """The head's fields as wire lines, without the hop-by-hop ones and those its own
    ``Connection`` names (``keep``: lowercased names kept all the same, e.g. ``upgrade``)."""
    drop = (HOP_BY_HOP | head.tokens(b"connection")) - keep
    return [name + b": " + value for name, value in head.fields if name.lower() not in drop]


END = b"\r\n\r\n"


@dataclass(slots=True)
class Request:
    """A request head as the router reads it: where its body ends, whether the client keeps
    its connection, the host it asks for (port stripped, lowercased), and an upgrade."""

    head: Head
    method: bytes
    target: bytes
    version: bytes
    framing: Framing
    keep: bool
    raw_host: str
    host: str
    upgrade: bool


def read_request(raw: bytes) -> Request:
    """``raw``: a request head up to (not including) its blank line. Refused (BadMessage): a
    malformed head, an HTTP version other than 1.0 and 1.1, an ambiguous body length."""
    head = parse_head(raw)
    parts = head.first.split(b" ")
    if len(parts) != 3:
        raise BadMessage(400, f"malformed request line {head.first[:40]!r}")
    method, target, version = parts
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise BadMessage(505, "only HTTP/1.0 and HTTP/1.1 are served")
    framing = request_body(head)
    connection = head.tokens(b"connection")
    raw_host = head.named.get(b"host", b"").decode("latin-1")
    return Request(
        head=head,
        method=method,
        target=target,
        version=version,
        framing=framing,
        keep=version == b"HTTP/1.1" and b"close" not in connection,
        raw_host=raw_host,
        host=raw_host.rsplit(":", 1)[0].strip("[]").lower(),
        upgrade=b"upgrade" in connection and b"upgrade" in head.named,
    )


def request_head(request: Request, ip: str) -> bytes:
    """The head sent to an instance: hop-by-hop fields dropped (an upgrade's kept),
    ``X-Forwarded-For/-Proto/-Host`` added. An HTTP/1.0 client is asked for as HTTP/1.0,
    so its answer comes unchunked."""
    head = request.head
    keep = frozenset({b"upgrade"}) if request.upgrade else frozenset()
    lines = [request.method + b" " + request.target + b" " + request.version]
    lines += forwarded_fields(head, keep)
    prior = head.named.get(b"x-forwarded-for")
    peer = ip.encode()
    lines.append(b"X-Forwarded-For: " + (prior + b", " + peer if prior else peer))
    lines.append(b"X-Forwarded-Proto: http")
    lines.append(b"X-Forwarded-Host: " + request.raw_host.encode("latin-1"))
    if request.upgrade:
        lines.append(b"Connection: upgrade")
    return b"\r\n".join(lines) + END


@dataclass(slots=True)
class Response:
    """A response head as the router reads it from an instance."""

    head: Head
    status: int
    version: bytes

    def framing(self, method: bytes) -> Framing:
        return response_body(self.head, self.status, method)

    def reusable(self, framing: Framing) -> bool:
        """The instance's connection may carry another request after this answer."""
        closes = b"close" in self.head.tokens(b"connection")
        return self.version == b"HTTP/1.1" and not closes and framing[0] != "close"


def read_response(raw: bytes) -> Response:
    """``raw``: a response head up to (not including) its blank line; refused with a 502
    when it is not HTTP/1.x."""
    head = parse_head(raw)
    version, _, rest = head.first.partition(b" ")
    code = rest[:3]
    if not (version.startswith(b"HTTP/1.") and code.isdigit()):
        raise BadMessage(502, f"not an HTTP response: {head.first[:40]!r}")
    return Response(head, int(code), version)


def upgrade_head(head: Head) -> bytes:
    """A ``101`` sent back to the client: its ``Upgrade`` kept, the connection upgraded."""
    lines = [head.first, *forwarded_fields(head, frozenset({b"upgrade"}))]
    lines.append(b"Connection: upgrade")
    return b"\r\n".join(lines) + END


def response_head(head: Head, keep: bool, informational: bool = False) -> bytes:
    """The head sent back to the client: HTTP/1.1, hop-by-hop fields dropped, and
    ``Connection: close`` when the client's connection ends after this answer."""
    lines = [b"HTTP/1.1" + head.first[8:], *forwarded_fields(head)]
    if not keep and not informational:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + END


def answer(
    status: int, text: str, close: bool, content_type: str = "text/plain; charset=utf-8"
) -> bytes:
    """A whole response of the router's own (plain text unless ``content_type`` says)."""
    body = text.encode()
    reason = REASONS.get(status, "Error")
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
    ]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
