"""HTTP/1.1 message heads and body framing, as the router needs them. PURE; standard
library only, because the router process loads it (and never imports shipway).

The router passes bodies through as they are framed on the wire (a chunked body stays
chunked, byte for byte), so all it must know of a message is its head and where its body
ends: :func:`parse_head` and :func:`body_of`. What must never happen here: a message whose
end is ambiguous being forwarded (two different ``Content-Length`` values, or both
``Transfer-Encoding`` and ``Content-Length`` on a request: the classic request-smuggling
shapes) — those are refused with a 400.
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


def chunk_size(line: bytes) -> int:
    """The size on a chunk-size line (extensions after ``;`` ignored)."""
    raw = line.split(b";", 1)[0].strip()
    try:
        size = int(raw, 16)
    except ValueError:
        raise BadMessage(400, f"invalid chunk size {raw[:20]!r}") from None
    if size < 0:
        raise BadMessage(400, "negative chunk size")
    return size


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


def response_head(head: Head, keep: bool, informational: bool = False) -> bytes:
    """The head sent back to the client: HTTP/1.1, hop-by-hop fields dropped, and
    ``Connection: close`` when the client's connection ends after this answer."""
    lines = [b"HTTP/1.1" + head.first[8:], *forwarded_fields(head)]
    if not keep and not informational:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + END


def answer(status: int, text: str, close: bool) -> bytes:
    """A whole plain-text response of the router's own."""
    body = text.encode()
    reason = REASONS.get(status, "Error")
    lines = [
        f"HTTP/1.1 {status} {reason}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
    ]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
