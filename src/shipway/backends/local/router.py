"""The HTTP router: one long-running process per router port, supervised like the apps.

Run as ``python router.py --port 8800 --tables DIR --control SOCKET`` (standalone: the
standard library and its siblings ``routetable.py``, ``http1.py``, ``relay.py`` and
``upstreams.py`` only — uvloop's event loop when it is installed — so it starts fast and
never imports shipway).

* Routes by Host header (port stripped, lowercased) to the upstreams (127.0.0.1:<port> of
  each instance) of the program the host points at, round-robin.
* An HTTP/1.1 proxy: the head is parsed and rewritten (hop-by-hop fields dropped,
  ``X-Forwarded-For/-Proto/-Host`` added), bodies pass through as they are framed on the
  wire, as they arrive (streaming, server-sent events), connections to the instances are
  kept alive and reused, and an ``Upgrade`` (WebSocket) answered ``101`` becomes a two-way
  tunnel. A request without a body is relayed in the event loop's callbacks
  (:mod:`relay`: no task, no wake-up per read); the first request with a body or an upgrade
  hands its connection to the stream path here (``Router.connection``) for the rest of its
  life. A response's head and its first bytes go out in one write.
* The table is the JSON files in ``--tables`` (one per app and slot, and one per generation
  of a blue-green slot, written atomically by the backend; the newest claim of a host wins:
  :mod:`routetable`); ``POST /reload`` on the control socket re-reads them and swaps the
  whole table in one assignment, so a switch is atomic: a request is routed either before
  it (old upstream) or after it (new upstream), never to a mix.
* Every request is counted against its upstream while it is in flight (a WebSocket for as
  long as it is open). The counter moves in the same event-loop step as the lookup, so once
  ``/reload`` has answered, every request that could still reach an old upstream is already
  counted, and ``POST /drain`` returns only when those requests have finished: this is what
  lets the backend stop an old process without dropping a request.
* A host's entry may carry a canary: its requests split between two releases by weight,
  sticky by a cookie, counted per release (:mod:`split`).
* Control API (unix socket, mode 0600): ``POST /reload``, ``GET /status``,
  ``POST /drain {"upstreams": [...], "timeout": seconds}``, ``GET /canary`` (the counts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__:  # imported as part of shipway (tests)
    from shipway.backends.local import http1, relay, routetable, split, upstreams
else:  # run as a script: its own directory is on sys.path, shipway is never imported
    import http1  # type: ignore[import-not-found,no-redef]
    import relay  # type: ignore[import-not-found,no-redef]
    import routetable  # type: ignore[import-not-found,no-redef]
    import split  # type: ignore[import-not-found,no-redef]
    import upstreams  # type: ignore[import-not-found,no-redef]

Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter


class Refused(Exception):
    """The upstream could not be reached: nothing was sent, another instance may take it."""


class ClosedEarly(Exception):
    """The upstream closed before any byte of its response."""


class Failed(Exception):
    """The upstream broke the exchange (after the request went out)."""


#: what ends an exchange or a connection: the peer's fault or its going away
BROKEN: tuple[type[BaseException], ...] = (
    OSError,
    ValueError,
    asyncio.IncompleteReadError,
    asyncio.LimitOverrunError,
)
#: what ends a client's connection
ENDED: tuple[type[BaseException], ...] = (*BROKEN, Failed)
#: what breaks an exchange with an upstream
UPSTREAM_BROKE: tuple[type[BaseException], ...] = (*BROKEN, Failed, http1.BadMessage)


class StreamConnection:
    """A kept-alive connection to an instance, on streams (the stream path's pool)."""

    __slots__ = ("reader", "writer")

    def __init__(self, reader: Reader, writer: Writer) -> None:
        self.reader, self.writer = reader, writer

    def alive(self) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing())

    def close(self) -> None:
        self.writer.close()


async def _send(writer: Writer, data: bytes) -> None:
    writer.write(data)
    if writer.transport.get_write_buffer_size() > relay.LIMIT:
        await writer.drain()


async def _copy_to_eof(reader: Reader, writer: Writer) -> None:
    while data := await reader.read(relay.LIMIT):
        await _send(writer, data)


async def _copy_body(reader: Reader, writer: Writer, framing: http1.Framing) -> None:
    """A body, byte for byte as framed, to its end (a chunked one's trailers included); never
    a byte past it is read (it belongs to the next message)."""
    body = http1.Body(framing)
    while not body.done:
        want = body.want()
        data = await (reader.read(min(want, relay.LIMIT)) if want else reader.readuntil(b"\n"))
        if not data:
            if body.kind == "close":
                return
            raise Failed("closed inside a body")
        body.feed(data)  # all of it: no more was asked for than the body holds
        await _send(writer, data)


async def _tunnel(a_reader: Reader, a_writer: Writer, b_reader: Reader, b_writer: Writer) -> None:
    """Bytes both ways until both directions ended (an upgraded connection: WebSocket)."""

    async def pump(reader: Reader, writer: Writer) -> None:
        with contextlib.suppress(OSError):
            await _copy_to_eof(reader, writer)
            if writer.can_write_eof():
                writer.write_eof()

    one = asyncio.ensure_future(pump(a_reader, b_writer))
    two = asyncio.ensure_future(pump(b_reader, a_writer))
    try:
        await asyncio.gather(one, two)
    finally:
        one.cancel()
        two.cancel()


async def _until_gone(reader: Reader) -> bytes:
    """Wait for the client to close its side; bytes it sends meanwhile (a pipelined request)
    end the watch and are returned to be read as the next request."""
    try:
        return await reader.read(relay.LIMIT) or b""
    except OSError:
        return b""


class Router:
    def __init__(self, port: int, tables: Path) -> None:
        self.port = port
        self.tables = tables
        self.table: dict[str, dict[str, Any]] = {}
        self.inflight: Counter[str] = Counter()
        self.turns: dict[tuple[str, str | None], itertools.count[int]] = {}
        self.tally = split.Tally()  # a canary's counts per release (split.py)
        self.reloaded_at = 0.0
        self.pool: upstreams.Pool[StreamConnection] = upstreams.Pool()  # the stream path's
        self.sides: upstreams.Pool[relay.UpstreamSide] = upstreams.Pool()  # the relay's
        self.streamed: set[asyncio.Task[None]] = set()  # connections on the stream path

    def reload(self) -> int:
        notes: list[str] = []
        table = routetable.load_table(self.tables, notes)
        for note in notes:
            print(f"router: {note}", file=sys.stderr, flush=True)
        self.table = table  # one assignment: the switch is atomic
        self.turns = {}
        self.reloaded_at = time.time()
        self.tally.forget({str(e["canary"].get("id")) for e in table.values() if e.get("canary")})
        self.sweep()
        return len(table)

    def sweep(self) -> None:
        known = self.known()
        self.pool.sweep(known)
        self.sides.sweep(known)

    def known(self) -> set[str]:
        known = {str(u) for e in self.table.values() for u in e["upstreams"]}
        return known | {
            str(u) for e in self.table.values() for u in split.upstreams_of(e, split.CANARY)
        }

    def pick(
        self, host: str, avoid: frozenset[str] = frozenset(), side: str | None = None
    ) -> str | None:
        """An upstream of the host's program (of its canary's, with ``side`` "canary"),
        round-robin, none of ``avoid``."""
        entry = self.table.get(host)
        if entry is None:
            return None
        ups = [u for u in split.upstreams_of(entry, side) if u not in avoid]
        if not ups:
            return None
        turn = next(self.turns.setdefault((host, side), itertools.count()))
        return str(ups[turn % len(ups)])

    # -- the public side -----------------------------------------------------------

    def hand_over(self, reader: Reader, writer: Writer) -> None:
        """The rest of a client's connection on the stream path (a request with a body or
        an upgrade came: :mod:`relay` serves the others)."""
        task = asyncio.get_running_loop().create_task(self.connection(reader, writer))
        self.streamed.add(task)
        task.add_done_callback(self.streamed.discard)

    async def connection(self, reader: Reader, writer: Writer) -> None:
        """One client connection: its requests in turn, while it keeps the connection."""
        peer = writer.get_extra_info("peername")
        ip = str(peer[0]) if peer else ""
        loop = asyncio.get_running_loop()
        carry = b""
        try:
            while True:
                idle = loop.call_later(relay.CLIENT_IDLE, writer.transport.close)
                try:
                    raw = await self._head(reader, carry)
                finally:
                    idle.cancel()
                if raw is None:
                    return
                keep, carry = await self.request(raw, ip, reader, writer)
                if not keep:
                    return
        except http1.BadMessage as exc:
            writer.write(http1.answer(exc.status, f"shipway router: {exc}\n", close=True))
        except ENDED:
            return
        finally:
            writer.close()

    async def _head(self, reader: Reader, carry: bytes) -> bytes | None:
        """The next request's head (None: the client closed between requests)."""
        if carry:
            reader._buffer[:0] = carry  # type: ignore[attr-defined]
        try:
            raw = await reader.readuntil(http1.END)
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise
            return None
        except asyncio.LimitOverrunError:
            raise http1.BadMessage(431, "request head too large") from None
        return raw.lstrip(b"\r\n")

    async def request(
        self, raw: bytes, ip: str, reader: Reader, writer: Writer
    ) -> tuple[bool, bytes]:
        """Serve one request; (keep the client connection, bytes read past it)."""
        try:
            request = http1.read_request(raw[:-4])
        except http1.BadMessage as exc:
            writer.write(http1.answer(exc.status, f"shipway router: {exc}\n", close=True))
            return False, b""
        keep, host = request.keep, request.host
        if host not in self.table:
            bodiless = request.framing[0] == "none"
            return self._refuse(writer, 404, relay.no_app(host, self.table), keep and bodiless)
        exchange = Exchange(self, request, ip, reader, writer)
        choice = exchange.choice
        tried: set[str] = set()
        while True:
            upstream = self.pick(host, frozenset(tried), choice.side if choice else None)
            if upstream is None:
                status = 502 if tried else 503
                keep_after = keep and not exchange.body_unread
                self.tally.failed(choice)
                return self._refuse(writer, status, relay.no_instance(host), keep_after)
            self.inflight[upstream] += 1  # same loop step as the lookup: see the module doc
            try:
                return await exchange.run(upstream, keep)
            except Refused:
                tried.add(upstream)  # nothing was sent: another instance may take it
            except ClosedEarly:
                if not exchange.replayable or upstream in tried:
                    self.tally.failed(choice)
                    return self._refuse(writer, 502, "shipway router: upstream closed\n", False)
                tried.add(upstream)
            except UPSTREAM_BROKE as exc:
                if exchange.answered:
                    return False, b""  # part of the answer went out: end the connection
                self.tally.failed(choice)
                why = f"shipway router: upstream failed: {exc or type(exc).__name__}\n"
                return self._refuse(writer, 502, why, False)
            finally:
                self.inflight[upstream] -= 1
                if self.inflight[upstream] <= 0:
                    del self.inflight[upstream]

    def _refuse(self, writer: Writer, status: int, text: str, keep: bool) -> tuple[bool, bytes]:
        writer.write(http1.answer(status, text, close=not keep))
        return keep, b""

    # -- the control side ----------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "pid": os.getpid(),
            "hosts": {h: e["upstreams"] for h, e in self.table.items()},
            "programs": {h: e["program"] for h, e in self.table.items()},
            "owners": {
                h: {"app": e["app"], "slot": e["slot"], "generation": e["generation"]}
                for h, e in self.table.items()
            },
            "inflight": dict(self.inflight),
            "canaries": {
                h: {k: v for k, v in e["canary"].items() if k != "upstreams"}
                for h, e in self.table.items()
                if e.get("canary")
            },
            "reloaded_at": self.reloaded_at,
            "loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
        }

    async def drain(self, doc: dict[str, Any]) -> dict[str, Any]:
        upstreams = [str(u) for u in doc.get("upstreams", [])]
        deadline = time.monotonic() + float(doc.get("timeout", 30.0))
        while True:
            busy = sum(self.inflight.get(u, 0) for u in upstreams)
            if busy == 0:
                return {"drained": True, "inflight": 0}
            if time.monotonic() > deadline:
                return {"drained": False, "inflight": busy}
            await asyncio.sleep(0.01)

    async def control(self, reader: Reader, writer: Writer) -> None:
        """One request on the control socket, answered as JSON."""
        try:
            head = http1.parse_head((await reader.readuntil(http1.END))[:-4])
            method, path, _ = head.first.split(b" ")
            kind, length = http1.request_body(head)
            doc = json.loads(await reader.readexactly(length)) if kind == "length" else {}
            routes: dict[tuple[bytes, bytes], Callable[[], Awaitable[dict[str, Any]]]] = {
                (b"POST", b"/reload"): self._control_reload,
                (b"GET", b"/status"): self._control_status,
                (b"GET", b"/canary"): self._control_canary,
                (b"POST", b"/drain"): lambda: self.drain(doc if isinstance(doc, dict) else {}),
            }
            handler = routes.get((method, path))
            if handler is None:
                writer.write(
                    http1.answer(404, f"no {method.decode()} {path.decode()} here\n", True)
                )
            else:
                out = json.dumps(await handler())
                writer.write(http1.answer(200, out, True, content_type="application/json"))
            await writer.drain()
        except (OSError, ValueError, http1.BadMessage, asyncio.IncompleteReadError) as exc:
            with contextlib.suppress(OSError):
                writer.write(http1.answer(400, f"{exc}\n", True))
        finally:
            writer.close()

    async def _control_reload(self) -> dict[str, Any]:
        return {"hosts": self.reload()}

    async def _control_status(self) -> dict[str, Any]:
        return self.status()

    async def _control_canary(self) -> dict[str, Any]:
        # the weights it splits by now: a record names a share before this router has it
        weights = {
            str(e["canary"].get("id")): int(e["canary"].get("weight", 0))
            for e in self.table.values()
            if e.get("canary")
        }
        return {"pid": os.getpid(), "weights": weights, **self.tally.snapshot()}


class Exchange:
    """One request forwarded to one upstream at a time (tried again on another instance
    when nothing was sent), and its response back."""

    def __init__(
        self, router: Router, request: http1.Request, ip: str, reader: Reader, writer: Writer
    ) -> None:
        self.router, self.head, self.framing = router, request.head, request.framing
        self.method = method = request.method
        self.reader, self.writer = reader, writer
        #: the response's head went out to the client (no other answer is possible now)
        self.answered = False
        #: the request's body is still to be read from the client
        self.body_unread = request.framing[0] != "none"
        #: a short body, read whole before it is sent (so it can be sent again)
        self.body: bytes | None = None
        #: a streamed body began to go out (this request cannot be sent again)
        self.body_started = False
        self.upgrade = request.upgrade
        self.replayable = not self.body_unread and method in http1.IDEMPOTENT and not self.upgrade
        self.request_head = http1.request_head(request, ip)
        self.choice = router.tally.begin(
            split.choose(router.table[request.host], request.head.named)
        )

    async def _connect(self, upstream: str) -> tuple[Reader, Writer, bool]:
        taken = self.router.pool.take(upstream)
        if taken is not None:
            return taken.reader, taken.writer, True
        host, _, port = upstream.rpartition(":")
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port), limit=relay.LIMIT), relay.CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError, ValueError) as exc:
            raise Refused(str(exc)) from exc
        return reader, writer, False

    async def run(self, upstream: str, keep: bool) -> tuple[bool, bytes]:
        """Forward the request to ``upstream`` and its answer back: (keep, carried bytes)."""
        for attempt in (0, 1):
            up_reader, up_writer, reused = await self._connect(upstream)
            try:
                return await self._exchange(upstream, up_reader, up_writer, keep)
            except ClosedEarly:
                up_writer.close()
                # a kept-alive connection the instance closed while it idled: once more on
                # a new one, when the request is still whole here and safe to send twice
                again = self.method in http1.IDEMPOTENT and not self.body_started
                if not (reused and attempt == 0 and again):
                    raise
            except BaseException:
                up_writer.close()
                raise
        raise ClosedEarly()  # pragma: no cover - the loop returns or raises

    async def _exchange(
        self, upstream: str, up_reader: Reader, up_writer: Writer, keep: bool
    ) -> tuple[bool, bytes]:
        body_task: asyncio.Future[None] | None = None
        kind, length = self.framing
        if kind == "length" and length <= relay.LIMIT and b"expect" not in self.head.named:
            if self.body is None:
                self.body = await self.reader.readexactly(length)
                self.body_unread = False
            up_writer.write(self.request_head + self.body)
        else:
            up_writer.write(self.request_head)
            if kind != "none":
                self.body_started = True
                body_task = asyncio.ensure_future(self._send_body(up_writer))
        try:
            return await self._respond(upstream, up_reader, up_writer, keep, body_task)
        finally:
            if body_task is not None and not body_task.done():
                body_task.cancel()

    async def _send_body(self, up_writer: Writer) -> None:
        await _copy_body(self.reader, up_writer, self.framing)
        self.body_unread = False

    async def _respond(
        self,
        upstream: str,
        up_reader: Reader,
        up_writer: Writer,
        keep: bool,
        body_task: asyncio.Future[None] | None,
    ) -> tuple[bool, bytes]:
        while True:
            try:
                raw = await self._response_start(up_reader, body_task)
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    raise ClosedEarly() from None
                raise Failed("closed inside its response head") from None
            except ConnectionResetError:
                raise ClosedEarly() from None
            except asyncio.LimitOverrunError:
                raise Failed("response head too large") from None
            response = http1.read_response(raw[:-4])
            if response.status >= 200 or response.status == 101:
                self.router.tally.answered(self.choice, response.status)
            if response.status == 101 and self.upgrade:
                return await self._upgraded(response.head, up_reader, up_writer)
            if 100 <= response.status < 200:  # 100 Continue, 103 Early Hints: passed on
                informational = http1.response_head(response.head, keep=True, informational=True)
                self.writer.write(informational)
                continue
            break
        framing = response.framing(self.method)
        up_keep = response.reusable(framing)
        keep = keep and framing[0] != "close"
        out = split.with_cookie(http1.response_head(response.head, keep), self.choice)
        kind, length = framing
        self.answered = True
        if kind == "length":
            first = await up_reader.read(min(length, relay.LIMIT))
            if not first:
                raise Failed("closed inside its response body")
            self.writer.write(out + first)
            await _copy_body(up_reader, self.writer, ("length", length - len(first)))
            carry = b""
        elif kind == "none":
            self.writer.write(out)
            carry = b""
        else:
            self.writer.write(out)
            watch = body_task is None or body_task.done()
            carry = await self._stream(up_reader, framing, watch)
        if body_task is not None:
            if body_task.done():
                body_task.result()
            else:  # answered before the client finished its body: this connection ends
                keep = up_keep = False
        if self.writer.transport.get_write_buffer_size():
            await self.writer.drain()
        if up_keep:
            if up_reader._buffer:  # type: ignore[attr-defined]
                up_writer.close()  # bytes nobody asked for: the connection cannot be trusted
            else:
                self.router.pool.give(upstream, StreamConnection(up_reader, up_writer))
        else:
            up_writer.close()
        return keep and not self.writer.is_closing(), carry

    async def _response_start(
        self, up_reader: Reader, body_task: asyncio.Future[None] | None
    ) -> bytes:
        """The response's head; while a streamed body still goes out, a client that breaks
        off its body ends the exchange (the instance would wait for the rest forever)."""
        if body_task is None or body_task.done():
            return await up_reader.readuntil(http1.END)
        head = asyncio.ensure_future(up_reader.readuntil(http1.END))
        try:
            await asyncio.wait((head, body_task), return_when=asyncio.FIRST_COMPLETED)
            if not head.done() and body_task.exception() is not None:
                raise Failed(f"the client broke off its body: {body_task.exception()}")
            return await head
        finally:
            head.cancel()

    async def _stream(self, up_reader: Reader, framing: http1.Framing, watch_client: bool) -> bytes:
        """A body that may flow for long (chunked, or up to the close: server-sent events),
        stopped as soon as the client goes away (watched unless the client is still
        sending its own body)."""
        if not watch_client:
            await _copy_body(up_reader, self.writer, framing)
            return b""
        pump = asyncio.ensure_future(_copy_body(up_reader, self.writer, framing))
        watch = asyncio.ensure_future(_until_gone(self.reader))
        try:
            await asyncio.wait((pump, watch), return_when=asyncio.FIRST_COMPLETED)
            if pump.done():
                pump.result()
                if not watch.done():
                    watch.cancel()
                    return b""
                return watch.result()
            carry = watch.result()
            if not carry:
                raise Failed("the client went away")
            await pump  # the client sent its next request: finish this answer first
            return carry
        finally:
            pump.cancel()
            watch.cancel()

    async def _upgraded(
        self, head: http1.Head, up_reader: Reader, up_writer: Writer
    ) -> tuple[bool, bytes]:
        self.answered = True
        self.writer.write(http1.upgrade_head(head))
        await _tunnel(self.reader, self.writer, up_reader, up_writer)
        up_writer.close()
        return False, b""


async def serve(port: int, tables: Path, control: Path) -> None:
    router = Router(port, tables)
    router.reload()
    loop = asyncio.get_running_loop()
    public = [await loop.create_server(lambda: relay.ClientSide(router), "127.0.0.1", port)]
    with contextlib.suppress(OSError):  # IPv6 loopback when the machine has it
        public.append(await loop.create_server(lambda: relay.ClientSide(router), "::1", port))
    with contextlib.suppress(FileNotFoundError):
        control.unlink()
    control_server = await asyncio.start_unix_server(router.control, str(control))
    os.chmod(control, 0o600)
    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    print(
        f"router: serving 127.0.0.1:{port}, control {control} (event loop: {loop_name})",
        file=sys.stderr,
        flush=True,
    )

    async def sweep() -> None:
        while True:
            await asyncio.sleep(upstreams.UPSTREAM_IDLE / 3)
            router.sweep()

    sweeper = asyncio.ensure_future(sweep())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    sweeper.cancel()
    for server in (control_server, *public):
        server.close()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop (a default dependency where it has a build; ``SHIPWAY_ROUTER_LOOP=asyncio``
    asks for the standard one, which is also the fallback); docs/local.md has the figures of
    both."""
    if os.environ.get("SHIPWAY_ROUTER_LOOP", "auto") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="shipway's local HTTP router")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tables", type=Path, required=True)
    parser.add_argument("--control", type=Path, required=True)
    args = parser.parse_args(argv)
    args.tables.mkdir(parents=True, exist_ok=True)
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(args.port, args.tables, args.control))
    except OSError as exc:
        print(f"router: cannot serve on 127.0.0.1:{args.port}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
