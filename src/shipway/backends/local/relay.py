"""The router's fast path: a request without a body, relayed in the event loop's callbacks.

Most requests a web app gets carry no body (GET, HEAD, most DELETEs). For those the router
needs no coroutine: the client's bytes arrive in :class:`ClientSide`'s callback, where the
head is parsed, rewritten and written to a kept-alive connection to an instance; the
instance's answer is written to the client as its bytes arrive, in :class:`UpstreamSide`'s
callback. On streams the same request took a task per connection and a task wake-up for
every read, which was most of what the router added to a request (docs/local.md, *Speed*).

A request with a body, or an upgrade (WebSocket), hands its connection to the stream path
(``router.py``'s ``Router.connection``) for the rest of the connection's life, with every
byte not yet read: bodies stream both ways and tunnels stay on the code that does them.

What must never happen here: a connection to an instance pooled after an answer that did
not end cleanly, or with bytes after it nobody asked for; a request counted in flight in
another loop step than its upstream's lookup (a drain relies on it); an answer's bytes
reordered or dropped; a client's connection left open with nothing left to answer it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Protocol

if __package__:  # imported as part of shipway (tests)
    from shipway.backends.local import http1, split, upstreams
else:  # run as a script: its own directory is on sys.path, shipway is never imported
    import http1  # type: ignore[import-not-found,no-redef]
    import split  # type: ignore[import-not-found,no-redef]
    import upstreams  # type: ignore[import-not-found,no-redef]

LIMIT = 64 * 1024  # the longest head accepted; past it a client's reading is paused
CONNECT_TIMEOUT = 5.0
CLIENT_IDLE = 75.0  # a kept-alive client connection with no request is closed after this


def no_app(host: str, table: dict[str, Any]) -> str:
    """The text of the 404 for a host the table does not hold."""
    known = ", ".join(sorted(table)) or "none"
    return f"shipway router: no app is served at {host!r} here (hosts: {known})\n"


def no_instance(host: str) -> str:
    """The text of the 502/503 when no instance of the host's program answers."""
    return f"shipway router: no running instance serves {host!r}\n"


class Broke(Exception):
    """The instance broke the exchange (after the request went out)."""


class Routes(Protocol):
    """What the relay needs of the router."""

    table: dict[str, dict[str, Any]]
    inflight: Counter[str]
    sides: upstreams.Pool[UpstreamSide]
    tally: split.Tally

    def pick(
        self, host: str, avoid: frozenset[str] = frozenset(), side: str | None = None
    ) -> str | None: ...

    def hand_over(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve the rest of a client's connection on the stream path."""
        ...


class UpstreamSide(asyncio.Protocol):
    """A connection to an instance, serving one :class:`Relay` at a time, pooled between."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.relay: Relay | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.relay is not None:
            self.relay.upstream_data(data)
        elif self.transport is not None:
            self.transport.close()  # bytes nobody asked for: the connection cannot be trusted

    def eof_received(self) -> bool:
        if self.relay is not None:
            self.relay.upstream_closed()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.relay is not None:
            self.relay.upstream_closed()

    def alive(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.relay = None
        if self.transport is not None:
            self.transport.close()


class ClientSide(asyncio.Protocol):
    """One client connection: its bodiless requests relayed in turn, until one with a body
    or an upgrade hands the connection over to the stream path."""

    def __init__(self, router: Routes) -> None:
        self.router = router
        self.transport: asyncio.Transport | None = None
        self.ip = ""
        self.buffer = bytearray()
        self.relay: Relay | None = None
        self.idle: asyncio.TimerHandle | None = None
        self.eof = False
        self.reading_paused = False  # more than a head's worth piled up while answering
        self.writing_paused = False  # the client reads slower than the answer comes
        #: the stream path's protocol, once the connection is handed over
        self.streams: asyncio.StreamReaderProtocol | None = None
        self.serving = False  # in _next: a relay that ends at once returns to its loop

    # -- the transport's callbacks -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.ip = str(peer[0]) if peer else ""
        self._wait_for_request()

    def data_received(self, data: bytes) -> None:
        if self.streams is not None:
            self.streams.data_received(data)
            return
        self.buffer += data
        if self.relay is None:
            self._next()
        elif len(self.buffer) > LIMIT and not self.reading_paused and self.transport:
            self.reading_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        if self.streams is not None:
            return self.streams.eof_received()
        self.eof = True
        if self.relay is None:
            self._next()
        return True  # an answer under way still goes out on the open half

    def connection_lost(self, exc: Exception | None) -> None:
        if self.streams is not None:
            self.streams.connection_lost(exc)
            return
        self._cancel_idle()
        if self.relay is not None:
            self.relay.client_gone()
            self.relay = None

    def pause_writing(self) -> None:
        if self.streams is not None:
            self.streams.pause_writing()
            return
        self.writing_paused = True
        if self.relay is not None:
            self.relay.hold(True)

    def resume_writing(self) -> None:
        if self.streams is not None:
            self.streams.resume_writing()
            return
        self.writing_paused = False
        if self.relay is not None:
            self.relay.hold(False)

    # -- requests ------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if data and self.transport is not None:
            self.transport.write(data)

    def refuse(self, status: int, text: str, keep: bool) -> None:
        """An answer of the router's own; the connection ends after it unless ``keep``."""
        self.write(http1.answer(status, text, close=not keep))
        if not keep and self.transport is not None:
            self.transport.close()

    def done(self, keep: bool) -> None:
        """The relay under way ended; serve the next request, or end the connection."""
        self.relay = None
        if not keep:
            if self.transport is not None:
                self.transport.close()
        elif not self.serving:
            self._next()

    def _next(self) -> None:
        """Serve the requests whose heads are whole in the buffer, one at a time (a relay
        that ends at once — no instance to send to — does not recurse: its ``done`` finds
        this loop serving, and the loop goes on)."""
        self.serving = True
        try:
            self._serve()
        finally:
            self.serving = False

    def _serve(self) -> None:
        while self.relay is None and self.streams is None:
            transport = self.transport
            if transport is None or transport.is_closing():
                return
            end = self.buffer.find(http1.END)
            if end < 0:
                if len(self.buffer) > LIMIT:
                    self.refuse(431, "shipway router: request head too large\n", False)
                elif self.eof:
                    transport.close()  # the client is done (a partial head: it gave up)
                else:
                    if self.reading_paused:
                        self.reading_paused = False
                        transport.resume_reading()
                    if self.idle is None:
                        self._wait_for_request()
                return
            self._cancel_idle()
            try:
                request = http1.read_request(bytes(self.buffer[:end]).lstrip(b"\r\n"))
            except http1.BadMessage as exc:
                self.refuse(exc.status, f"shipway router: {exc}\n", False)
                return
            if request.framing[0] != "none" or request.upgrade:
                self._hand_over()
                return
            del self.buffer[: end + len(http1.END)]
            if request.host not in self.router.table:
                self.refuse(404, no_app(request.host, self.router.table), request.keep)
                continue
            self.relay = Relay(self, request)
            self.relay.start()

    def _hand_over(self) -> None:
        """The stream path serves this connection from here on, from its first unread byte."""
        transport = self.transport
        assert transport is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=LIMIT, loop=loop)
        streams = asyncio.StreamReaderProtocol(reader, loop=loop)
        streams.connection_made(transport)
        writer = asyncio.StreamWriter(transport, streams, reader, loop)
        if self.reading_paused:
            self.reading_paused = False
            transport.resume_reading()
        self.streams = streams
        if self.writing_paused:
            streams.pause_writing()
        pending, self.buffer = bytes(self.buffer), bytearray()
        streams.data_received(pending)
        if self.eof:
            streams.eof_received()
        self.router.hand_over(reader, writer)

    def _wait_for_request(self) -> None:
        if self.transport is not None:
            loop = asyncio.get_running_loop()
            self.idle = loop.call_later(CLIENT_IDLE, self.transport.close)

    def _cancel_idle(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None


class Relay:
    """One bodiless request, sent to an instance (another one when nothing was answered and
    it may be sent again), and its answer back to the client as it comes."""

    def __init__(self, client: ClientSide, request: http1.Request) -> None:
        self.client = client
        self.router = client.router
        self.request = request
        self.out = http1.request_head(request, client.ip)
        self.idempotent = request.method in http1.IDEMPOTENT
        self.tried: set[str] = set()
        self.upstream: str | None = None  # counted in flight while set
        self.side: UpstreamSide | None = None
        self.reused = False
        self.again = False  # sent once more after a kept-alive connection closed unused
        self.connecting: asyncio.Task[None] | None = None
        self.ended = False
        self.answered = False  # the answer's head went out (no other answer is possible)
        self.keep = request.keep
        self.up_keep = False
        self.held = False  # the instance's reading paused while the client catches up
        self.head = bytearray()
        self.body: http1.Body | None = None  # where the answer's body ends, once its head is read
        #: the side of a canary's host this request goes to (None: the host has no canary)
        self.choice = self.router.tally.begin(
            split.choose(self.router.table[request.host], request.head.named)
        )

    # -- sending -------------------------------------------------------------------

    def start(self) -> None:
        """Pick an instance (the lookup and the in-flight count in one step) and send."""
        side = self.choice.side if self.choice else None
        upstream = self.router.pick(self.request.host, frozenset(self.tried), side)
        if upstream is None:
            status = 502 if self.tried else 503
            self._end_with(status, no_instance(self.request.host), self.request.keep)
            return
        self.upstream = upstream
        self.router.inflight[upstream] += 1
        self.again = False
        self._send()

    def _send(self) -> None:
        assert self.upstream is not None
        side = self.router.sides.take(self.upstream)
        self.reused = side is not None
        if side is not None:
            self._attach(side)
        else:
            self.connecting = asyncio.ensure_future(self._connect(self.upstream))

    async def _connect(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            _, side = await asyncio.wait_for(
                loop.create_connection(UpstreamSide, host, int(port)), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError, ValueError):
            self.connecting = None
            if not self.ended:  # refused: nothing was sent, another instance may take it
                self._release()
                self.tried.add(upstream)
                self.start()
            return
        self.connecting = None
        if self.ended:
            side.close()
            return
        self._attach(side)

    def _attach(self, side: UpstreamSide) -> None:
        self.side = side
        self.held = False
        side.relay = self
        assert side.transport is not None
        side.transport.write(self.out)
        if self.client.writing_paused:
            self.hold(True)

    # -- the answer ----------------------------------------------------------------

    def upstream_data(self, data: bytes) -> None:
        try:
            if self.body is not None:
                self._body(data)
            else:
                self._head(data)
        except (Broke, http1.BadMessage, ValueError) as exc:
            self._broke(str(exc) or type(exc).__name__)

    def _head(self, data: bytes) -> None:
        self.head += data
        while True:
            end = self.head.find(http1.END)
            if end < 0:
                if len(self.head) > LIMIT:
                    raise Broke("response head too large")
                return
            response = http1.read_response(bytes(self.head[:end]))
            del self.head[: end + len(http1.END)]
            if response.status >= 200:
                break
            # 100 Continue, 103 Early Hints (and a 101 nobody asked for): passed on
            self.client.write(http1.response_head(response.head, keep=True, informational=True))
        self._answer(response)

    def _answer(self, response: http1.Response) -> None:
        framing = response.framing(self.request.method)
        self.up_keep = response.reusable(framing)
        self.keep = self.keep and framing[0] != "close"
        self.answered = True
        self.body = http1.Body(framing)
        self.router.tally.answered(self.choice, response.status)
        rest, self.head = bytes(self.head), bytearray()
        head = split.with_cookie(http1.response_head(response.head, self.keep), self.choice)
        self._body(rest, head)

    def _body(self, data: bytes, prefix: bytes = b"") -> None:
        """Bytes of the answer's body (after ``prefix``, its head, when it goes out now)."""
        body = self.body
        assert body is not None
        take = body.feed(data)  # none (HEAD, 204, 304, a length of 0) takes nothing
        self.client.write(prefix + data[:take] if take < len(data) else prefix + data)
        if body.done:
            if take < len(data):
                self.up_keep = False  # bytes after the answer: the connection is not reused
            self._finish()

    def hold(self, held: bool) -> None:
        """Pause (or resume) reading from the instance while the client's buffer is full."""
        side = self.side
        if side is None or side.transport is None or held == self.held:
            return
        self.held = held
        if held:
            side.transport.pause_reading()
        else:
            side.transport.resume_reading()

    # -- endings -------------------------------------------------------------------

    def upstream_closed(self) -> None:
        """The instance closed (or reset) the connection."""
        side, self.side = self.side, None
        if side is not None:
            side.close()
        if self.ended:
            return
        if self.body is not None and self.body.kind == "close":
            self.keep = self.up_keep = False
            self._finish()
        elif self.body is not None:
            self._broke("closed inside its response body")
        elif self.head:
            self._broke("closed inside its response head")
        else:
            self._closed_early()

    def _closed_early(self) -> None:
        """Closed before any byte of its answer."""
        if self.reused and not self.again and self.idempotent:
            # a kept-alive connection the instance closed while it idled: once more
            self.again = True
            self._send()
            return
        upstream = self.upstream
        self._release()
        if upstream in self.tried:  # pragma: no cover - a tried upstream is never picked
            self._end_with(502, "shipway router: upstream closed\n", False)
            return
        if not self.idempotent:
            self._end_with(502, "shipway router: upstream closed\n", False)
            return
        assert upstream is not None
        self.tried.add(upstream)
        self.start()

    def _broke(self, why: str) -> None:
        side, self.side = self.side, None
        if side is not None:
            side.close()
        self._release()
        if self.answered:  # part of the answer went out: the client's connection ends
            self._end(False)
        else:
            self._end_with(502, f"shipway router: upstream failed: {why}\n", False)

    def _finish(self) -> None:
        """The answer ended: the instance's connection back to the pool (when it may be
        reused), the in-flight count down, the client's next request."""
        side, self.side = self.side, None
        if side is not None:
            side.relay = None
            if self.held and side.transport is not None:
                side.transport.resume_reading()
            if self.up_keep and self.upstream is not None and side.alive():
                self.router.sides.give(self.upstream, side)
            else:
                side.close()
        self._release()
        self._end(self.keep)

    def client_gone(self) -> None:
        """The client's connection was lost: whatever the instance still sends is nobody's."""
        self.ended = True
        side, self.side = self.side, None
        if side is not None:
            side.close()
        self._release()  # a connect under way finds the relay ended, and closes what it made

    def _release(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            inflight = self.router.inflight
            inflight[upstream] -= 1
            if inflight[upstream] <= 0:
                del inflight[upstream]

    def _end_with(self, status: int, text: str, keep: bool) -> None:
        self.router.tally.failed(self.choice)  # only ever an answer of the router's own
        self.client.write(http1.answer(status, text, close=not keep))
        self._end(keep)

    def _end(self, keep: bool) -> None:
        if not self.ended:
            self.ended = True
            self.client.done(keep)
