"""``/api/live``: the dashboard's server-sent events of the operations running now, read
from the files every command writes (events/live.py) — over real HTTP from the server in
this process. A page that opens gets a ``reset``, then every running operation and each
slot's last one if it ended recently (an old one is left out), then what is written as it is
written; a slot's stream holds that slot's operations only; an operation whose process died
without its ``ended`` is told ``gone``; a secret a spec knows is masked; GET and HEAD only,
and the token rules hold."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shipway.dashboard.reads import Catalogue
from shipway.dashboard.server import DashboardServer
from shipway.events.live import LiveFile
from shipway.events.model import Ended, Said, Started, StepBegun
from shipway.release.audit import Audit
from tests.engine.test_live_files import dead_pid, write_op

TOKEN = "tkn-0123456789abcdef"
SECRET = "s3cr3t-live-5e8f"
SPEC = """\
[app]
name = "shop"
[processes.web]
command = "python3 app.py"
port = 8000
[secrets]
SHOP_TOKEN = { from_env = "SHOP_TOKEN" }
[slots.test1]
"""


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SHIPWAY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SHOP_TOKEN", SECRET)
    (tmp_path / "shipway.toml").write_text(SPEC)
    return tmp_path / "state"


def serve(state: Path, token: str | None = None) -> DashboardServer:
    catalogue = Catalogue([state.parent / "shipway.toml"], [state])
    server = DashboardServer(("127.0.0.1", 0), catalogue, token)
    serving = threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True)
    serving.start()
    return server


@pytest.fixture
def server(state: Path) -> Iterator[DashboardServer]:
    s = serve(state)
    try:
        yield s
    finally:
        s.shutdown()
        s.server_close()


class Stream:
    """One page's ``/api/live`` stream, read message by message."""

    def __init__(self, port: int, path: str = "/api/live") -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        self.conn.request("GET", path)
        self.response = self.conn.getresponse()
        self.messages: list[tuple[str, Any]] = []

    def next(self) -> tuple[str, Any]:
        kind, data = "message", None
        while True:
            line = self.response.fp.readline().decode()
            assert line, "the stream ended"
            if line == "\n" and data is not None:
                self.messages.append((kind, data))
                return kind, data
            if line.startswith("event: "):
                kind = line[7:].strip()
            elif line.startswith("data: "):
                data = json.loads(line[6:])

    def until(self, check: Callable[[Any], bool], what: str) -> Any:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            kind, data = self.next()
            if kind == "message" and check(data):
                return data
        raise AssertionError(f"no {what} in {self.messages}")

    def close(self) -> None:
        self.conn.close()


def events_of(stream: Stream) -> list[tuple[str, str]]:
    """(op, event kind or "gone") of every message read so far."""
    return [
        (d["op"], d["event"]["event"] if "event" in d else "gone")
        for k, d in stream.messages
        if k == "message"
    ]


def test_a_page_gets_what_runs_and_what_just_ended_then_each_event_as_it_is_written(
    state: Path, server: DashboardServer
) -> None:
    where = state / "_events"
    old = write_op(where, "20260101T000000000000", dead_pid(), ended=True, age=3600)
    recent = write_op(where, "20260101T000001000000", dead_pid(), ended=True)
    running = LiveFile(where)
    running.emit(Started("deploy", "shop", "test1", "local", Audit("alice", "box")))
    running.emit(StepBegun(1, 3, "apply web"))
    assert running.path is not None
    op = running.path.name.removesuffix(".jsonl")

    stream = Stream(server.server_address[1])
    try:
        assert stream.response.status == 200
        assert stream.response.getheader("Content-Type") == "text/event-stream; charset=utf-8"
        assert stream.next() == ("reset", {})
        stream.until(lambda d: d["op"] == op and d["event"]["event"] == "step", what="step 1")
        seen = {o for o, _ in events_of(stream)}
        assert recent.name.removesuffix(".jsonl") in seen
        assert old.name.removesuffix(".jsonl") not in seen  # ended an hour ago: left out

        running.emit(StepBegun(2, 3, "wait for web"))
        step = stream.until(lambda d: d.get("event", {}).get("index") == 2, what="step 2")
        assert (step["app"], step["slot"], step["pid"]) == ("shop", "test1", os.getpid())
        running.emit(Said(f"the app printed {SECRET}"))
        said = stream.until(lambda d: d["event"]["event"] == "said", what="the said line")
        assert said["event"]["text"] == "the app printed ***"
        running.emit(Ended("rolled", 0, "rolled r1 → r2"))
        ended = stream.until(lambda d: d["event"]["event"] == "ended", what="its end")
        assert ended["event"]["line"] == "rolled r1 → r2"

        # an operation started after the page opened: from its first event
        second = LiveFile(where)
        second.emit(Started("restart", "shop", "test1", "local", Audit("bob", "box")))
        stream.until(lambda d: d["event"].get("operation") == "restart", what="the next one")
    finally:
        stream.close()


def test_a_slots_stream_holds_that_slot_alone_and_a_dead_writer_is_told_gone(
    state: Path, server: DashboardServer
) -> None:
    where = state / "_events"
    other = LiveFile(where)
    other.emit(Started("deploy", "shop", "prod", "local", Audit("alice", "box")))
    killed = write_op(where, "20260101T000001000000", dead_pid(), ended=False)
    stream = Stream(server.server_address[1], "/api/live?app=shop&slot=test1")
    try:
        assert stream.next() == ("reset", {})
        stream.until(lambda d: d.get("gone") is True, what="the killed operation, gone")
        mine = LiveFile(where)
        mine.emit(Started("deploy", "shop", "test1", "local", Audit("alice", "box")))
        other.emit(StepBegun(1, 1, "apply web on prod"))
        mine.emit(StepBegun(1, 1, "apply web on test1"))
        stream.until(lambda d: d.get("event", {}).get("event") == "step", what="test1's step")
        slots = {d["slot"] for k, d in stream.messages if k == "message"}
        assert slots == {"test1"}
        assert events_of(stream)[0] == (killed.name.removesuffix(".jsonl"), "started")
    finally:
        stream.close()


def test_head_only_headers_and_every_other_method_refused(server: DashboardServer) -> None:
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("HEAD", "/api/live")
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type", "").startswith("text/event-stream")
    assert r.read() == b""
    conn.close()
    for method in ("POST", "PUT", "DELETE"):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request(method, "/api/live")
        r = conn.getresponse()
        assert (r.status, r.getheader("Allow")) == (405, "GET, HEAD")
        conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/api/live?app=shop")
    r = conn.getresponse()
    assert r.status == 400 and "app=APP&slot=SLOT" in r.read().decode()
    conn.close()


def test_the_token_and_loopback_rules_hold(state: Path) -> None:
    server = serve(state, TOKEN)
    port = server.server_address[1]
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/live")
        assert conn.getresponse().status == 401
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/api/live", headers={"Cookie": f"shipway_dashboard={TOKEN}"})
        r = conn.getresponse()
        assert r.status == 200 and r.fp.readline().startswith(b"retry:")
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
    server = serve(state)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        conn.request("GET", "/api/live", headers={"Host": "rebound.example:80"})
        assert conn.getresponse().status == 403
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
