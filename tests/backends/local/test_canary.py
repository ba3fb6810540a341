"""Canary releases on the local backend: real processes, real HTTP through the router, a
bounded request loop beside the deploy. A broken canary is aborted within a few failed
requests and the stable serves alone again; a good one walks its steps to 100 %; a client
keeps its side (a cookie), a header picks one; a kill -9 halfway is put back."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipway import canary as canary_api
from tests.backends.local.conftest import Slot, eventually, slot_of
from tests.canary_spec import canary_table
from tests.loops import RequestLoop

APP = '''\
"""A web app whose / fails (BROKEN=1) or is slow (DELAY seconds) on purpose."""
import http.server
import os
import socketserver
import time

BROKEN = os.environ.get("BROKEN") == "1"
DELAY = float(os.environ.get("DELAY", "0"))
RELEASE = os.environ.get("SHIPWAY_RELEASE", "dev")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/up":
            code, body = 200, b"ok"
        else:
            time.sleep(DELAY)
            code, body = (500, b"broken") if BROKEN else (200, RELEASE.encode())
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Release", RELEASE)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 128


Server(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''

SPEC = """\
[app]
name = "canary"

[processes.web]
command = "python3 app.py"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 50

[processes.worker]
command = "python3 -c 'import time; time.sleep(3600)'"
[processes.worker.healthcheck]
path = false
initial_delay = "1s"

[env]
BROKEN = "0"

[slots.local]
strategy = "canary"
""" + canary_table("local", "STEP_TIME", 20)

HOST = "canary.localhost"


@pytest.fixture
def canary_slot(tmp_path: Path) -> Iterator[Slot]:
    app_dir = tmp_path / "canary"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(APP)
    (app_dir / "shipway.toml").write_text(SPEC.replace("STEP_TIME", "1s"))
    s = slot_of(app_dir, tmp_path / "state")
    try:
        yield s
    finally:
        s.close()


def get(slot: Slot, headers: dict[str, str] | None = None) -> tuple[int, str, str | None]:
    """(status, the release that answered, the cookie it set)."""
    conn = http.client.HTTPConnection("127.0.0.1", slot.port, timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": HOST, **(headers or {})})
        response = conn.getresponse()
        response.read()
        return (
            response.status,
            response.getheader("X-Release") or "",
            response.getheader("Set-Cookie"),
        )
    finally:
        conn.close()


def released(slot: Slot) -> tuple[int, str]:
    """(status, the release that answered): one request of a loop."""
    status, release, _ = get(slot)
    return status, release


def routes(slot: Slot) -> dict[str, dict[str, object]]:
    path = slot.state / "canary" / "local" / "routes.json"
    doc = json.loads(path.read_text())
    return dict(doc.get("routes", doc))


def test_a_fully_broken_canary_is_aborted_within_a_few_failed_requests(
    canary_slot: Slot,
) -> None:
    slot = canary_slot
    slot.deploy()  # r1: a first deploy, nothing to compare with: rolled as usual
    assert get(slot)[:2] == (200, "r1")
    stable = set(slot.programs())
    slot.edit_spec('BROKEN = "0"', 'BROKEN = "1"')
    with RequestLoop(lambda _: released(slot), rate=100) as load:
        eventually(lambda: len(load.answers) > 20, what="the request loop")
        r = slot.deploy(expect=10)
        after = len(load.answers)
        eventually(lambda: len(load.answers) > after + 50, what="requests after the abort")
    assert "rolled back" in r.text and "CanaryAborted" in r.text, r.text
    assert "aborted at 10%" in r.text
    failed = load.failed()
    assert failed, "the broken canary got no request: the split did not happen"
    assert all(a.body == "r2" for a in failed)
    assert len(failed) <= 10, failed
    # after the abort: the stable alone, the canary's processes gone
    assert {a.body for a in load.answers[after:]} == {"r1"}
    assert all(a.status == 200 for a in load.answers[after:])
    eventually(lambda: set(slot.programs()) == stable, what="only the stable's programs")
    status = slot.json("canary", "status", "local")
    assert status["running"] is False
    r2 = slot.history()[-1]
    assert r2["status"] == "failed"
    assert r2["canary"][0]["verdict"] == "abort"
    assert r2["canary"][0]["canary"]["bad"] >= 3  # error_ratio 10: 3 x log(10) > A


def test_a_canary_that_never_answers_is_aborted_once_its_answer_timeout_passes(
    canary_slot: Slot,
) -> None:
    slot = canary_slot
    slot.deploy()
    stable = set(slot.programs())
    # r2 answers its health check but never a request (it sleeps 10 minutes first); the
    # step would be inconclusive after 30 s without the answer timeout (nothing answered)
    slot.edit_spec('BROKEN = "0"', 'BROKEN = "0"\nDELAY = "600"')
    slot.edit_spec("error_ratio = 10", 'error_ratio = 10\nanswer_timeout = "1s"\ntimeout = "30s"')
    loops = [RequestLoop(lambda _: released(slot), rate=20) for _ in range(8)]
    for loop in loops:
        loop.__enter__()
    try:
        eventually(lambda: sum(len(lp.answers) for lp in loops) > 20, what="the request loops")
        r = slot.deploy(expect=10)
    finally:
        for loop in loops:
            loop.__exit__()
    assert "rolled back" in r.text and "CanaryAborted" in r.text, r.text
    assert "CanaryInconclusive" not in r.text, r.text
    r2 = slot.history()[-1]
    assert r2["canary"][0]["verdict"] == "abort"
    assert r2["canary"][0]["canary"]["bad"] >= 3  # the requests it never answered
    assert r2["canary"][0]["canary"]["failures"] >= 3
    assert [get(slot)[:2] for _ in range(20)] == [(200, "r1")] * 20
    eventually(lambda: set(slot.programs()) == stable, what="only the stable's programs")


def test_a_good_canary_walks_its_steps_and_the_stable_goes(canary_slot: Slot) -> None:
    slot = canary_slot
    slot.deploy()
    before = set(slot.programs())
    slot.edit_spec('BROKEN = "0"', 'BROKEN = "0"\nCOLOUR = "blue"')
    plan = slot.run("plan", "local")
    assert "send 10% of requests to the new release" in plan.out, plan.text
    assert "analyse the canary at 50%" in plan.out and "false aborts: at most 0.01" in plan.out
    with RequestLoop(lambda _: released(slot), rate=100) as load:
        eventually(lambda: len(load.answers) > 20, what="the request loop")
        r = slot.deploy()
        after = len(load.answers)
        eventually(lambda: len(load.answers) > after + 30, what="requests after the switch")
    assert "rolled" in r.text and "canary 10%" in r.text and "canary 50%" in r.text, r.text
    assert load.failed() == []
    served = Counter(a.body for a in load.answers)
    assert served["r1"] > 0 and served["r2"] > 0
    assert {a.body for a in load.answers[after:]} == {"r2"}
    assert not (before & set(slot.programs())), "the stable's programs still run"
    r2 = slot.history()[-1]
    assert r2["status"] == "deployed"
    assert [s["percent"] for s in r2["canary"]] == [10, 50]
    assert all(s["verdict"] == "promote" for s in r2["canary"])


def _held_canary(slot: Slot) -> subprocess.Popen[str]:
    """r1 deployed, then r2's deploy holding its canary at 10 % (a long step)."""
    slot.deploy()
    slot.edit_spec('step_time = "1s"', 'step_time = "10m"')
    slot.edit_spec('BROKEN = "0"', 'BROKEN = "0"\nCOLOUR = "blue"')
    deploy = slot.spawn("deploy", "local")

    def at_ten() -> bool:  # the router's share: requests are split from now on
        doc = slot.json("canary", "status", "local")
        return bool(doc["running"] and doc["percent"] == 10)

    eventually(at_ten, timeout=60, what="the canary at 10%")
    return deploy


def _deploy_now(deploy: subprocess.Popen[str]) -> str:
    """What the deploy holding the canary said, if it ended (a failure's message)."""
    if deploy.poll() is None:
        return "the deploy holding the canary still runs"
    out = deploy.stdout.read() if deploy.stdout is not None else ""
    return f"the deploy holding the canary exited {deploy.returncode}:\n{out}"


def test_a_client_keeps_its_side_and_a_header_picks_one(canary_slot: Slot) -> None:
    slot = canary_slot
    deploy = _held_canary(slot)
    assert {get(slot, {"X-Shipway-Canary": "always"})[1] for _ in range(10)} == {"r2"}
    assert {get(slot, {"X-Shipway-Canary": "never"})[1] for _ in range(10)} == {"r1"}
    # the share said is the router's, not a record's written ahead of the router's reload
    path = slot.state / "canary" / "local" / "routes.json"
    kept = path.read_text()
    path.write_text(kept.replace('"weight": 10', '"weight": 50'))
    try:
        assert routes(slot)[HOST]["canary"]["weight"] == 50  # type: ignore[index]
        status = slot.json("canary", "status", "local")
        assert status["percent"] == 10, f"{status}; {_deploy_now(deploy)}"
    finally:
        path.write_text(kept)
    # a client without the cookie gets one; with it, it stays on its side
    sides: dict[str, str] = {}
    for _ in range(60):
        _, release, cookie = get(slot)
        assert cookie and cookie.startswith("shipway-canary=canary.local.r2.")
        value = cookie.split(";")[0]
        assert {get(slot, {"Cookie": value})[1] for _ in range(5)} == {release}
        sides[value] = release
    assert set(sides.values()) == {"r1", "r2"}  # 10 %: some clients on each side
    on_canary = [c for c, rel in sides.items() if rel == "r2"]
    # promoted by hand (a clearance, like every mutation): 50 %, a canary client stays
    r = slot.run("canary", "promote", "local", "-o", "json")
    assert r.code == 0, r.text
    assert json.loads(r.out)["taken_by_pid"] == deploy.pid
    eventually(lambda: slot.json("canary", "status", "local")["percent"] == 50, what="50%")
    assert {get(slot, {"Cookie": on_canary[0]})[1] for _ in range(5)} == {"r2"}
    status = slot.json("canary", "status", "local")
    assert status["counts"]["on_canary"]["requests"] > 0
    assert status["analysis"]["tests"][0]["test"] == "errors"
    assert slot.run("canary", "promote", "local").code == 0
    assert deploy.wait(timeout=60) == 0
    assert {get(slot)[1] for _ in range(10)} == {"r2"}


def test_a_decision_waits_for_a_deploy_slow_to_take_it_while_it_notes_its_state(
    canary_slot: Slot,
) -> None:
    """A deploy that takes longer than 5 s to read a decision (here: stopped for 8 s) but
    noted its state within the last 15 s is waited for: it takes the decision itself, and
    the command does not act on a canary it took for left behind."""
    slot = canary_slot
    deploy = _held_canary(slot)
    pid = deploy.pid
    noted = lambda: slot.json("canary", "status", "local")["deploy_pid"] == pid  # noqa: E731
    eventually(noted, what="the deploy's state noted")
    os.kill(pid, signal.SIGSTOP)
    try:
        decision = slot.spawn("canary", "promote", "local", "-o", "json")
        eventually(lambda: decision_noted(slot), what="the decision noted")
        stopped_for = canary_api.TAKEN_WITHIN + 3  # the scenario: a deploy this slow
        assert decision.poll() is None
        time.sleep(stopped_for)
        # still waiting: the deploy's note is recent
        assert decision.poll() is None, decision.communicate()[0]
    finally:
        os.kill(pid, signal.SIGCONT)
    out, _ = decision.communicate(timeout=60)
    assert decision.returncode == 0, out
    assert f"waiting for the deploy running canary canary.local.r2 (pid {pid}" in out, out
    assert json.loads(out[out.index("\n{") :])["taken_by_pid"] == pid, out  # after that line
    eventually(lambda: slot.json("canary", "status", "local")["percent"] == 50, what="50%")
    assert slot.run("canary", "promote", "local").code == 0
    assert deploy.wait(timeout=60) == 0


def decision_noted(slot: Slot) -> bool:
    """Whether a decision by hand waits in the slot's canary notes (``run/``)."""
    return any(slot.state.rglob("run/canary-decision.json"))


@pytest.mark.parametrize("verdict", ["abort", "promote"])
def test_a_canary_left_by_a_killed_deploy_ends_with_one_release_serving(
    canary_slot: Slot, verdict: str
) -> None:
    slot = canary_slot
    deploy = _held_canary(slot)
    os.kill(deploy.pid, signal.SIGKILL)
    deploy.wait(timeout=10)
    # left behind: the split goes on (both releases still run), nobody decides it
    assert {get(slot, {"X-Shipway-Canary": "always"})[1] for _ in range(3)} == {"r2"}
    status = slot.json("canary", "status", "local")
    assert status["running"] and not status["deploy_alive"]
    r = slot.run("canary", verdict, "local")
    assert r.code == 0, r.text
    serving, gone = ("r1", "failed") if verdict == "abort" else ("r2", "deployed")
    assert {get(slot)[1] for _ in range(30)} == {serving}
    assert {get(slot, {"X-Shipway-Canary": "always"})[1] for _ in range(5)} == {serving}
    assert not slot.json("canary", "status", "local")["running"]
    assert all(not route.get("canary") for route in routes(slot).values())
    assert slot.history()[-1]["status"] == gone
    if verdict == "abort":
        assert "recovering: r2 was left pending" in r.text
    else:
        assert [h["status"] for h in slot.history()] == ["superseded", "deployed"]
    # one release's web and worker run, the other's are gone
    eventually(lambda: len(slot.programs()) == 2, what="one release's programs only")


def test_validate_refuses_a_kubernetes_canary_without_its_gateway(tmp_path: Path) -> None:
    app_dir = tmp_path / "d"
    app_dir.mkdir()
    (app_dir / "shipway.toml").write_text(
        '[app]\nname = "d"\nimage = "d:1"\n[processes.web]\nport = 8000\n'
        '[slots.prod]\nbackend = "kubernetes"\nstrategy = "canary"\n'
        '[slots.prod.canary]\nprometheus = "ftp://x"\n'
    )
    s = slot_of(app_dir, tmp_path / "state")
    r = s.run("validate")
    assert r.code == 2, r.text
    assert "slots.prod.canary.gateway" in r.text and "is required" in r.text
    assert "slots.prod.canary.prometheus" in r.text and "http(s) URL without a user" in r.text
    assert "ftp://x" not in r.text  # shown as possibly a secret: never echoed
    # the keys are a kubernetes slot's only
    (app_dir / "shipway.toml").write_text(
        '[app]\nname = "d"\n[processes.web]\ncommand = "x"\nport = 8000\n'
        '[slots.prod]\nstrategy = "canary"\n[slots.prod.canary]\ngateway = "a/b"\n'
    )
    r = s.run("validate")
    assert r.code == 2 and "slots.prod.canary.gateway" in r.text and "unknown key" in r.text
    shutil.rmtree(app_dir)
