"""The router process itself, between a real client and a real app (an aiohttp server in
this test's process): keep-alive to the app, bodies streamed both ways, server-sent events,
WebSockets, a client that goes away, an app that closes idle connections, and the message
shapes it refuses. Every request goes through ``router.py`` started as the backend starts
it (its own process, a table file, a control socket)."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from shipway.backends.local.router_control import ROUTER_SCRIPT
from tests.backends.local.conftest import eventually, free_port

HOST = "app.localhost"
BIG = bytes(range(256)) * (32 * 1024)  # 8 MiB


class App:
    """An aiohttp app on a loop of its own thread: it counts the TCP connections it was
    given and can hold an answer until the test lets it go on."""

    def __init__(self) -> None:
        self.connections: set[tuple[str, int]] = set()
        self.closed_streams = 0
        self.dropped: list[asyncio.BaseTransport] = []
        self.loop = asyncio.new_event_loop()
        self.go_on = asyncio.Event()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10), "the test app did not start"

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_get("/", self.hello)
        app.router.add_get("/bye", self.bye)
        app.router.add_post("/echo", self.echo)
        app.router.add_get("/stream", self.stream)
        app.router.add_get("/events", self.events)
        app.router.add_get("/ws", self.websocket)
        app.router.add_get("/big", self.big)
        app.router.add_get("/empty", self.empty)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        ready.set()
        self.loop.run_forever()

    def release(self) -> None:
        """Let a held answer go on."""
        self.loop.call_soon_threadsafe(self.go_on.set)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def _seen(self, request: web.Request) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            self.connections.add((str(peer[0]), int(peer[1])))

    async def hello(self, request: web.Request) -> web.Response:
        self._seen(request)
        forwarded = request.headers.get("X-Forwarded-For", "")
        return web.Response(text=f"hello via {forwarded}\n")

    async def big(self, request: web.Request) -> web.Response:
        """8 MiB by length: more than any socket buffer holds, so a client that reads it
        slowly holds the router's writes back."""
        self._seen(request)
        return web.Response(body=BIG, content_type="application/octet-stream")

    async def empty(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.Response(status=204)

    async def bye(self, request: web.Request) -> web.Response:
        """Answered as kept alive; the connection is closed right after, as an app does when
        its keep-alive timeout runs out while the connection idles."""
        self._seen(request)
        transport = request.transport
        assert transport is not None
        self.dropped.append(transport)
        asyncio.get_running_loop().call_later(0.05, transport.close)
        return web.Response(text="bye\n")

    async def echo(self, request: web.Request) -> web.Response:
        self._seen(request)
        digest, size = hashlib.sha256(), 0
        async for chunk in request.content.iter_any():
            digest.update(chunk)
            size += len(chunk)
        chunked = request.headers.get("Transfer-Encoding", "")
        return web.json_response({"size": size, "sha256": digest.hexdigest(), "te": chunked})

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """A body in two parts; the second only once the test saw the first."""
        self._seen(request)
        self.go_on.clear()
        response = web.StreamResponse()
        response.content_type = "text/plain"
        await response.prepare(request)
        await response.write(b"first part\n")
        await self.go_on.wait()
        await response.write(b"second part\n")
        await response.write_eof()
        return response

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events until the client goes away (then counted as closed)."""
        self._seen(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        n = 0
        try:
            while True:
                await response.write(f"id: {n}\ndata: tick {n}\n\n".encode())
                n += 1
                await asyncio.sleep(0.05)
        except (ConnectionResetError, asyncio.CancelledError, OSError):
            self.closed_streams += 1
            raise

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                await ws.send_str(f"echo: {message.data}")
            elif message.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(message.data[::-1])
        return ws


class Router:
    """``router.py`` in its own process, with one table file pointing HOST at the app."""

    def __init__(self, tmp: Path, upstream: int, loop: str) -> None:
        self.port = free_port()
        self.tables = tmp / "tables"
        self.tables.mkdir()
        self.sock = tmp / "control.sock"
        self.point([f"127.0.0.1:{upstream}"])
        argv = [sys.executable, str(ROUTER_SCRIPT), "--port", str(self.port)]
        argv += ["--tables", str(self.tables), "--control", str(self.sock)]
        self.proc = subprocess.Popen(
            argv,
            env={**os.environ, "SHIPWAY_ROUTER_LOOP": loop},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        eventually(self._listening, what="the router to listen")

    def _listening(self) -> bool:
        """Both listeners take connections (the control socket's file exists from its bind,
        a moment before it listens: a connect then is refused)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=1):
            pass
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.sock))
        return True

    def point(self, upstreams: list[str]) -> None:
        hosts = {HOST: {"program": "p", "upstreams": upstreams, "since": 1.0}}
        doc = {"app": "app", "slot": "test", "hosts": hosts}
        (self.tables / "app.test.json").write_text(json.dumps(doc))

    def control(self, method: str, path: str) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.sock))
            s.sendall(f"{method} {path} HTTP/1.1\r\nHost: router\r\n\r\n".encode())
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
        doc: dict[str, Any] = json.loads(raw.split(b"\r\n\r\n", 1)[1])
        return doc

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def app() -> Iterator[App]:
    a = App()
    try:
        yield a
    finally:
        a.stop()


@pytest.fixture(params=["uvloop", "asyncio"])
def router(request: pytest.FixtureRequest, tmp_path: Path, app: App) -> Iterator[Router]:
    """Every test runs on both loops: uvloop's (a default dependency) and the standard
    library's (the fallback where uvloop has no build)."""
    r = Router(tmp_path, app.port, request.param)
    try:
        assert r.control("GET", "/status")["loop"] == request.param
        yield r
    finally:
        r.stop()


def get(router: Router, path: str = "/") -> tuple[int, str]:
    conn = router.connection()
    try:
        conn.request("GET", path, headers={"Host": HOST})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_requests_on_new_client_connections_reuse_kept_alive_connections_to_the_app(
    router: Router, app: App
) -> None:
    answers = [get(router) for _ in range(20)]
    assert answers == [(200, "hello via 127.0.0.1\n")] * 20
    # one request at a time: the router's connection to the app is reused every time
    assert len(app.connections) == 1, f"{len(app.connections)} connections for 20 requests"


def test_a_client_keeping_its_connection_alive_is_answered_on_it(router: Router) -> None:
    conn = router.connection()
    try:
        for _ in range(5):
            conn.request("GET", "/", headers={"Host": HOST})
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b"hello via 127.0.0.1\n")
            assert response.getheader("Connection") is None  # kept alive: no "close"
        first = conn.sock.getsockname() if conn.sock else None
        conn.request("GET", "/", headers={"Host": HOST})
        conn.getresponse().read()
        assert first is not None and conn.sock.getsockname() == first
    finally:
        conn.close()


def test_request_bodies_stream_through_chunked_and_by_length(router: Router) -> None:
    parts = [bytes([i]) * 100_000 for i in range(1, 6)]
    whole = b"".join(parts)
    conn = router.connection()
    try:
        conn.request("POST", "/echo", body=iter(parts), headers={"Host": HOST},
                     encode_chunked=True)  # fmt: skip
        chunked = json.loads(conn.getresponse().read())
        conn.request("POST", "/echo", body=whole, headers={"Host": HOST})
        by_length = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    expected = {"size": len(whole), "sha256": hashlib.sha256(whole).hexdigest()}
    assert chunked == {**expected, "te": "chunked"}  # still chunked on the app's side
    assert by_length == {**expected, "te": ""}


def test_a_response_body_is_passed_on_as_it_comes(router: Router, app: App) -> None:
    conn = router.connection()
    try:
        conn.request("GET", "/stream", headers={"Host": HOST})
        response = conn.getresponse()
        # the first part arrives while the app still holds the second one back
        assert response.readline() == b"first part\n"
        app.release()
        assert response.read() == b"second part\n"
    finally:
        conn.close()


def test_server_sent_events_flow_and_end_when_the_client_goes_away(
    router: Router, app: App
) -> None:
    conn = router.connection()
    conn.request("GET", "/events", headers={"Host": HOST, "Accept": "text/event-stream"})
    response = conn.getresponse()
    assert response.getheader("Content-Type") == "text/event-stream"
    lines = [response.readline() for _ in range(6)]
    assert lines == [b"id: 0\n", b"data: tick 0\n", b"\n", b"id: 1\n", b"data: tick 1\n", b"\n"]
    assert router.control("GET", "/status")["inflight"] == {f"127.0.0.1:{app.port}": 1}
    conn.close()
    # the router notices and ends the app's stream: the stream no longer counts as in flight
    eventually(lambda: app.closed_streams == 1, what="the app to see the stream closed")
    eventually(
        lambda: router.control("GET", "/status")["inflight"] == {}, what="nothing in flight"
    )


def _websocket(router: Router, work: Callable[[Any], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(
                f"http://127.0.0.1:{router.port}/ws", headers={"Host": HOST}
            ) as ws,
        ):
            return await work(ws)

    return asyncio.run(run())


def test_websockets_are_upgraded_and_tunnelled_both_ways(router: Router, app: App) -> None:
    async def talk(ws: Any) -> list[Any]:
        await ws.send_str("hi")
        text = await ws.receive_str(timeout=10)
        await ws.send_bytes(b"abc")
        data = await ws.receive_bytes(timeout=10)
        inflight = router.control("GET", "/status")["inflight"]
        return [text, data, inflight]

    text, data, inflight = _websocket(router, talk)
    assert text == "echo: hi"
    assert data == b"cba"
    # an open WebSocket counts as in flight, so a drain waits for it
    assert inflight == {f"127.0.0.1:{app.port}": 1}
    eventually(
        lambda: router.control("GET", "/status")["inflight"] == {}, what="the socket to end"
    )


def test_an_app_closing_an_idle_connection_costs_no_request(router: Router, app: App) -> None:
    assert get(router, "/bye") == (200, "bye\n")
    eventually(lambda: app.dropped[0].is_closing(), what="the app to close the connection")
    answers = [get(router) for _ in range(5)]
    assert answers == [(200, "hello via 127.0.0.1\n")] * 5
    assert len(app.connections) == 2  # the closed one, then one new one kept alive


def test_a_request_with_an_ambiguous_length_is_refused_before_reaching_the_app(
    router: Router, app: App
) -> None:
    with socket.create_connection(("127.0.0.1", router.port), timeout=10) as s:
        s.sendall(
            f"POST /echo HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 4\r\n"
            "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n".encode()
        )
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 400 ")
    assert b"both Transfer-Encoding and Content-Length" in raw
    assert app.connections == set()


def test_an_instance_that_refuses_connections_is_skipped_for_one_that_answers(
    router: Router, app: App
) -> None:
    router.point([f"127.0.0.1:{free_port()}", f"127.0.0.1:{app.port}"])
    router.control("POST", "/reload")
    assert [get(router) for _ in range(4)] == [(200, "hello via 127.0.0.1\n")] * 4


def _exchange(router: Router, raw: bytes, answers: int) -> list[tuple[int, bytes]]:
    """Send ``raw`` (one or more requests) at once on one connection; read ``answers``
    length-framed answers back, in order: (status, body)."""
    with socket.create_connection(("127.0.0.1", router.port), timeout=10) as s:
        s.sendall(raw)
        buffer, out = b"", []
        while len(out) < answers:
            while b"\r\n\r\n" not in buffer:
                chunk = s.recv(65536)
                assert chunk, f"closed after {len(out)} answers: {buffer!r}"
                buffer += chunk
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            status = int(head.split(b" ", 2)[1])
            fields = dict(
                (k.strip().lower(), v.strip())
                for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])
            )
            length = int(fields.get(b"content-length", 0))
            while len(buffer) < length:
                buffer += s.recv(65536)
            out.append((status, buffer[:length]))
            buffer = buffer[length:]
    return out


def test_pipelined_requests_are_answered_in_order_on_one_connection(router: Router) -> None:
    """Three requests in one write, an unknown host among them: each answered in turn,
    and the 404 of the router's own keeps the connection."""
    one = f"GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
    unknown = "GET / HTTP/1.1\r\nHost: nobody.localhost\r\n\r\n"
    empty = f"GET /empty HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
    answers = _exchange(router, (one + unknown + empty + one).encode(), 4)
    assert [status for status, _ in answers] == [200, 404, 204, 200]
    assert answers[0][1] == answers[3][1] == b"hello via 127.0.0.1\n"
    assert b"no app is served at 'nobody.localhost'" in answers[1][1]


def test_a_connection_moves_from_bodiless_requests_to_a_body_and_back(
    router: Router, app: App
) -> None:
    """GET, then a POST with a body (the connection goes to the stream path with its
    unread bytes), then GET again: all on one client connection, all answered."""
    conn = router.connection()
    try:
        conn.request("GET", "/", headers={"Host": HOST})
        assert conn.getresponse().read() == b"hello via 127.0.0.1\n"
        first = conn.sock.getsockname() if conn.sock else None
        conn.request("POST", "/echo", body=b"x" * 1000, headers={"Host": HOST})
        assert json.loads(conn.getresponse().read())["size"] == 1000
        conn.request("HEAD", "/", headers={"Host": HOST})
        head = conn.getresponse()
        assert (head.status, head.read()) == (200, b"")
        conn.request("GET", "/", headers={"Host": HOST})
        assert conn.getresponse().read() == b"hello via 127.0.0.1\n"
        assert first is not None and conn.sock is not None and conn.sock.getsockname() == first
    finally:
        conn.close()


def test_a_large_answer_to_a_slow_client_arrives_whole(router: Router) -> None:
    """8 MiB read in small pieces with pauses: the router holds the app's bytes back while
    the client's buffer is full, and loses none."""
    conn = router.connection()
    try:
        conn.request("GET", "/big", headers={"Host": HOST})
        response = conn.getresponse()
        got = bytearray()
        while piece := response.read(256 * 1024):
            got += piece
            if len(got) < 2 * 1024 * 1024:
                time.sleep(0.02)  # a slow reader (not a wait for a condition), for 2 MiB
        assert hashlib.sha256(got).digest() == hashlib.sha256(BIG).digest()
        conn.request("GET", "/", headers={"Host": HOST})  # the connection still serves
        assert conn.getresponse().read() == b"hello via 127.0.0.1\n"
    finally:
        conn.close()


def test_an_http_1_0_client_is_answered_and_its_connection_closed(router: Router) -> None:
    raw = f"GET / HTTP/1.0\r\nHost: {HOST}\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", router.port), timeout=10) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(65536):  # the router closes after the answer
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"Transfer-Encoding" not in head  # asked as HTTP/1.0: not chunked
    assert body == b"hello via 127.0.0.1\n"


def test_many_pipelined_requests_answered_at_once_are_all_answered(router: Router) -> None:
    """A host with no running instance: each request is answered (503) in the step that
    read it, without waiting for anything; 1,500 of them sent in one write are answered in
    turn, the connection kept (no recursion per answer)."""
    router.point([])
    router.control("POST", "/reload")
    one = f"GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
    answers = _exchange(router, (one * 1500).encode(), 1500)
    assert {status for status, _ in answers} == {503}
    assert answers[-1][1] == b"shipway router: no running instance serves 'app.localhost'\n"
