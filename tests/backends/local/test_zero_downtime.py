"""Zero downtime: a client on loopback sends requests in a loop while the app is
redeployed several times (and its web process restarted); not one request may fail."""

from __future__ import annotations

import http.client
import threading
from collections import Counter

from tests.backends.local.conftest import Slot, eventually


class Client(threading.Thread):
    """Sends GET / through the router until stopped (bounded: at most 20 000 requests)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self.bodies: Counter[str] = Counter()

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        for _ in range(20_000):
            if self.stop.is_set():
                break
            try:
                conn.request("GET", "/", headers={"Host": "hello.localhost"})
                response = conn.getresponse()
                body = response.read().decode()
                if response.status == 200:
                    self.ok += 1
                    self.bodies[body.strip()] += 1
                else:
                    self.failures.append(f"{response.status} {body.strip()}")
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.close()


def test_no_request_fails_across_redeploys_and_a_web_restart(slot: Slot) -> None:
    slot.deploy()
    clients = [Client(slot.port) for _ in range(3)]
    for c in clients:
        c.start()
    try:
        for greeting in ("one", "two", "three"):
            slot.edit_spec('GREETING = "hello"', f'GREETING = "{greeting}"')
            slot.deploy()
            slot.edit_spec(f'GREETING = "{greeting}"', 'GREETING = "hello"')
        r = slot.run("restart", "local", "web")
        assert r.code == 0, r.text
        eventually(
            lambda: all(c.bodies["three from r5"] > 0 for c in clients),
            what="every client to reach the restarted web",
        )
    finally:
        for c in clients:
            c.stop.set()
        for c in clients:
            c.join(timeout=30)
    failures = [f for c in clients for f in c.failures]
    served = sum(c.ok for c in clients)
    bodies: Counter[str] = Counter()
    for c in clients:
        bodies.update(c.bodies)
    assert failures == [], f"{len(failures)} failed requests of {served + len(failures)}"
    assert served > 200, "the load was too light to mean anything"
    # every release in turn served traffic: the switches really happened under load
    for expected in ("one from r2", "two from r3", "three from r4", "three from r5"):
        assert bodies[expected] > 0, f"{expected!r} never served: {dict(bodies)}"


def test_a_slow_request_in_flight_is_drained_before_its_process_stops(slot: Slot) -> None:
    from shipway.backends.local.router_control import RouterControl

    slot.deploy()
    router = RouterControl(slot.state, slot.port, slot.supervisor())
    answer: dict[str, tuple[int, str]] = {}
    request = threading.Thread(target=lambda: answer.update(r=slot.get("/slow?seconds=3")))
    request.start()
    eventually(lambda: router.status()["inflight"], what="the slow request to be in flight")
    slot.edit_spec('GREETING = "hello"', 'GREETING = "next"')
    r = slot.deploy()
    request.join(timeout=30)
    # the old process was stopped only after its in-flight request was answered
    assert answer["r"] == (200, "hello from r1, slowly\n")
    assert r.out.index("serving http://") < r.out.index("] remove program/web@")
    assert slot.get("/") == (200, "next from r2\n")
