"""A watched set stays true when its watch breaks: a watch too old to resume (410 Gone)
lists again, so a pod deleted meanwhile leaves the set; a watch whose reconnect fails is
opened again with back-off instead of ending the wait with an error.

What a real API server does at those moments (compacting its history, restarting) cannot
be caused on the test cluster on demand, so these run against an API server of the test's
own over real HTTP, answering exactly as Kubernetes does (a PodList, watch events, an
``ERROR`` event carrying a 410 Status)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from shipway.backends.kubernetes.watch import Changes, LiveSet, WatchLoop

NAMESPACE = "web"


def pod(name: str, version: str) -> dict[str, Any]:
    meta = {"name": name, "resourceVersion": version}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def event(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


GONE = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "code": 410,
    "reason": "Expired",
    "message": "too old resource version: 10 (15)",
}

#: what one answer does: the handler, the watch's resourceVersion (None: asked without one)
Answer = Callable[["Handler", "str | None"], None]


class APIServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, lists: list[dict[str, Any]], watches: list[Answer]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lists = lists  # each list request takes the next; the last one stays
        self.watches = watches  # each watch request takes the next; the last one stays
        self.done = threading.Event()
        self.asked: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: APIServer
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urlparse(self.path)
        assert url.path == f"/api/v1/namespaces/{NAMESPACE}/pods", url.path
        query = parse_qs(url.query)
        srv = self.server
        if query.get("watch") == ["true"]:
            version = query.get("resourceVersion", [None])[0]
            srv.asked.append(f"watch {version}")
            answer = srv.watches.pop(0) if len(srv.watches) > 1 else srv.watches[0]
            answer(self, version)
            return
        srv.asked.append("list")
        listed = srv.lists.pop(0) if len(srv.lists) > 1 else srv.lists[0]
        body = json.dumps(listed).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream(self, *events: bytes, hold: bool = False) -> None:
        """A watch's answer: the events, then the stream ends (or stays open: ``hold``)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        for e in events:
            self.wfile.write(e)
            self.wfile.flush()
        if hold:
            self.server.done.wait(30)


def pods(version: str, *names: str) -> dict[str, Any]:
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": version},
        "items": [pod(n, version) for n in names],
    }


def drop(handler: Handler, version: str | None) -> None:
    """The server goes away as the watch is opened again: no answer at all."""
    handler.close_connection = True


@pytest.fixture
def serve() -> Iterator[Callable[[APIServer], LiveSet]]:
    servers: list[APIServer] = []
    loops: list[WatchLoop] = []
    sets: list[LiveSet] = []

    def start(server: APIServer) -> LiveSet:
        from lightkube.config.kubeconfig import KubeConfig

        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        config = KubeConfig.from_dict(
            {
                "clusters": [{"name": "test", "cluster": {"server": server.url}}],
                "users": [{"name": "anyone", "user": {}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "anyone"}}],
                "current-context": "test",
            }
        )
        loop = WatchLoop(config.get())
        loops.append(loop)
        from lightkube.resources.core_v1 import Pod

        live = LiveSet(loop, Pod, NAMESPACE, Changes()).start(timeout=10)
        sets.append(live)
        return live

    yield start
    for live in sets:
        live.stop()
    for loop in loops:
        loop.close()
    for server in servers:
        server.done.set()
        server.shutdown()
        server.server_close()


def until(live: LiveSet, names: set[str], timeout: float = 15.0) -> None:
    """Wait, woken by the set's changes, until it holds exactly ``names``."""
    end = time.monotonic() + timeout
    seen = 0
    while set(live.snapshot()) != names:
        assert live.error is None, f"the watch ended: {live.error}"
        left = end - time.monotonic()
        assert left > 0, f"the set holds {sorted(live.snapshot())}, not {sorted(names)}"
        seen = live.changes.wait_past(seen, min(left, 0.5))
    assert live.error is None, live.error


def test_a_watch_too_old_to_resume_lists_again_and_a_pod_deleted_meanwhile_leaves_the_set(
    serve: Callable[[APIServer], LiveSet],
) -> None:
    def gone(h: Handler, version: str | None) -> None:
        h.stream(event("ERROR", GONE))

    def resumed(h: Handler, version: str | None) -> None:
        # asked with no version (lightkube's own restart) the server sends every pod
        # there is as ADDED — and nothing about b, deleted while the watch was gone
        news = [event("ADDED", pod("a", "20"))] if version is None else []
        h.stream(*news, event("ADDED", pod("c", "21")), hold=True)

    server = APIServer([pods("10", "a", "b"), pods("20", "a")], [gone, resumed])
    live = serve(server)
    assert set(live.initial) == {"a", "b"}
    until(live, {"a", "c"})
    assert server.asked[:4] == ["list", "watch 10", "list", "watch 20"], server.asked
    assert set(live.initial) == {"a", "b"}  # what was there when the wait began stays so


def test_a_watch_whose_reconnect_fails_is_opened_again_and_the_wait_goes_on(
    serve: Callable[[APIServer], LiveSet],
) -> None:
    def ends(h: Handler, version: str | None) -> None:
        h.stream(event("ADDED", pod("b", "11")))  # then the server closes the stream

    def unavailable(h: Handler, version: str | None) -> None:
        h.send_response(503)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        h.wfile.write(json.dumps({**GONE, "code": 503, "reason": "ServiceUnavailable"}).encode())

    def back(h: Handler, version: str | None) -> None:
        h.stream(event("ADDED", pod("c", "12")), hold=True)

    server = APIServer([pods("10", "a")], [ends, drop, drop, unavailable, back])
    live = serve(server)
    until(live, {"a", "b", "c"})
    # resumed from the last version seen each time: no list again, nothing missed
    assert server.asked == ["list", "watch 10", "watch 11", "watch 11", "watch 11", "watch 11"]
