"""Notifications through the command line, with real deploys on the local backend and real
HTTP receivers in this test: exactly one message per receiver per outcome (a failure and
its rollback too), signed with HMAC-SHA256 under a secret named by reference, no secret in
any payload; a receiver that is down is retried and said, a slow one never holds the
outcome back, and neither changes the exit code."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.backends.local.conftest import Slot, eventually, free_port

KEY = "hook-key-5b1e0c27d9"  # the signing secret's value: in no payload, ever


@dataclass
class Receiver:
    """A webhook receiver on loopback: ``/good`` answers at once, ``/slow`` only once
    ``release`` is set, ``/flaky`` fails its first two tries (503)."""

    port: int
    got: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    slow_waiting: threading.Event = field(default_factory=threading.Event)
    flaky_tries: int = 0

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [json.loads(body) for p, _, body in list(self.got) if p == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(free_port())

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/flaky":
                state.flaky_tries += 1
                if state.flaky_tries <= 2:
                    self.send_response(503)
                    self.end_headers()
                    return
            if self.path == "/slow":
                state.slow_waiting.set()
                state.release.wait(30)
            state.got.append((self.path, dict(self.headers), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", state.port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def slot(hello: Slot) -> Slot:
    """The hello example deployed on the local backend (tests/cli/conftest.py)."""
    return hello


def with_receivers(slot: Slot, receiver: Receiver, down: int | None, *paths: str) -> None:
    hooks = "".join(
        f'\n[[notify]]\nurl = "http://127.0.0.1:{receiver.port}{p}"\nsecret = "HOOK_KEY"\n'
        for p in paths
    )
    if down is not None:
        hooks += (
            f'\n[[notify]]\nurl = "http://127.0.0.1:{down}/down"\nform = "slack"\n'
            'events = ["outcomes", "started"]\n'
        )
    text = slot.spec.read_text() + '\n[secrets]\nHOOK_KEY = { from_env = "HOOK_KEY" }\n'
    slot.spec.write_text(text + hooks)
    slot.env.update(HOOK_KEY=KEY, SHIPWAY_NOTIFY_BUDGET="3")


def signed(headers: dict[str, str], body: bytes) -> bool:
    want = "sha256=" + hmac.new(KEY.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers.get("X-Shipway-Signature", ""), want)


def test_one_signed_message_per_outcome_and_a_receiver_down_is_said(
    slot: Slot, receiver: Receiver
) -> None:
    down = free_port()  # nothing listens there
    with_receivers(slot, receiver, down, "/good", "/flaky")
    r = slot.deploy()
    assert "the ended notification to 127.0.0.1:" in r.text and "not delivered" in r.text
    slot.edit_spec('command = "python3 app.py"', "command = \"python3 -c 'raise SystemExit(3)'\"")
    failed = slot.deploy(expect=10)  # rolled back: told too, and the exit code stays 10
    assert "rolled back" in failed.out
    for path in ("/good", "/flaky"):
        bodies = eventually(
            lambda p=path: b if len(b := receiver.bodies(p)) >= 2 else None,  # type: ignore[misc]
            what=f"two messages at {path}",
        )
        assert [b["outcome"] for b in bodies] == ["rolled", "rolled-back"], bodies
        assert all(b["event"] == "ended" and b["started"]["who"]["user"] for b in bodies)
    # the first message: two refusals, retried, delivered on its third try; the second: at once
    assert receiver.flaky_tries == 4
    for path, headers, body in receiver.got:
        assert signed(headers, body), path
        assert KEY.encode() not in body
    ids = [h["X-Shipway-Delivery"] for _, h, _ in receiver.got]
    assert len(set(ids)) == len(ids) == 4  # exactly one message per outcome per receiver


def test_a_slow_receiver_never_holds_the_outcome_back(slot: Slot, receiver: Receiver) -> None:
    with_receivers(slot, receiver, None, "/slow")
    slot.env["SHIPWAY_NOTIFY_BUDGET"] = "20"
    p = slot.spawn("deploy", "local")
    assert p.stdout is not None
    outcome = ""
    while not outcome.startswith("rolled"):
        line = p.stdout.readline()
        assert line, "deploy ended without an outcome"
        outcome = line
    # the outcome is out while the slow receiver still holds its request
    assert receiver.slow_waiting.is_set() or eventually(receiver.slow_waiting.is_set)
    assert receiver.bodies("/slow") == [] and p.poll() is None
    started = time.monotonic()
    receiver.release.set()
    assert p.wait(timeout=20) == 0  # the exit code is the outcome's
    assert time.monotonic() - started < 10
    assert [b["outcome"] for b in receiver.bodies("/slow")] == ["rolled"]
