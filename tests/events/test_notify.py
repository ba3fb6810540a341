"""The notifier against a real HTTP receiver on loopback: the body is the event (with who
started the operation), signed under the referenced secret's value, masked of every secret
value; a 4xx is not retried; the Slack form says who broke the glass."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from shipway.events.model import Ended, Started
from shipway.events.notify import Notifier
from shipway.release.audit import Audit
from shipway.spec.notify import OUTCOMES, Receiver
from shipway.spec.secrets import Masker, Secret

KEY = Secret("sign-me-8c1f")
DB_PASSWORD = Secret("pw-0d2e41")


@pytest.fixture
def server() -> Iterator[tuple[int, list[tuple[str, dict[str, str], bytes]]]]:
    got: list[tuple[str, dict[str, str], bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got.append((self.path, dict(self.headers), body))
            self.send_response(404 if self.path == "/gone" else 200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], got
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_signed_masked_and_a_4xx_is_not_retried(
    server: tuple[int, list[tuple[str, dict[str, str], bytes]]],
) -> None:
    port, got = server
    said: list[str] = []
    receivers = [
        Receiver(f"http://127.0.0.1:{port}/json", secret="KEY"),
        Receiver(f"http://127.0.0.1:{port}/chat", form="slack", events=(*OUTCOMES, "started")),
        Receiver(f"http://127.0.0.1:{port}/gone"),
    ]
    secrets = {"KEY": KEY, "DB_PASSWORD": DB_PASSWORD}
    notifier = Notifier(receivers, secrets, Masker.of(secrets), said.append, budget=5)
    who = Audit("ada", "desk", clearance=("break-glass",), break_glass="incident 9")
    notifier.emit(Started("deploy", "shop", "prod", "local", who))
    line = f"rolled back shop/prod: r4 failed (connect to db with {DB_PASSWORD.reveal()} refused)"
    notifier.emit(Ended("rolled-back", 10, line, app="shop", slot="prod", operation="deploy"))
    notifier.join(10)
    by_path: dict[str, list[tuple[dict[str, str], bytes]]] = {}
    for path, headers, body in got:
        by_path.setdefault(path, []).append((headers, body))
    assert sorted(by_path) == ["/chat", "/gone", "/json"]
    assert len(by_path["/json"]) == 1 and len(by_path["/gone"]) == 1  # a 404: tried once
    assert len(by_path["/chat"]) == 2  # started and ended
    headers, body = by_path["/json"][0]
    want = "sha256=" + hmac.new(KEY.reveal().encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Shipway-Signature"] == want
    doc = json.loads(body)
    assert doc["outcome"] == "rolled-back" and doc["started"]["who"]["break_glass"] == "incident 9"
    for _, _, sent in got:
        assert DB_PASSWORD.reveal().encode() not in sent and KEY.reveal().encode() not in sent
    # each message is sent from a thread of its own: they may arrive in either order
    texts = [json.loads(b)["text"] for _, b in by_path["/chat"]]
    chat = sorted(texts, key=lambda t: "started by" in t)
    assert "started by ada@desk — BREAK-GLASS: incident 9" in chat[1]
    assert chat[0].startswith("shipway: rolled back shop/prod") and "BREAK-GLASS" in chat[0]
    assert [d.delivered for d in notifier.deliveries if d.receiver.endswith(str(port))].count(
        False
    ) == 1
    assert any("HTTP 404" in s for s in said)
