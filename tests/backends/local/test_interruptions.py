"""kill -9 of a deploy at several points, and two deploys racing for one slot.

Whatever instant the CLI dies at, the slot must keep serving (the old release, or the new
one fully live), the lock must not stay stuck, and the next deploy must recover: mark the
interrupted release failed, re-assert the deployed one, then roll forward."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from shipway.backends.local.router_control import RouterControl
from tests.backends.local.conftest import Slot, eventually


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 60) -> str:
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if marker in line:
            return seen
    raise AssertionError(f"{marker!r} never appeared; output was:\n{seen}")


@pytest.mark.parametrize(
    "marker",
    [
        "] update snapshot",  # copying the source
        "] create program/web@",  # starting the new processes
        "] wait until web is ready",  # in the health gate
        "] update route/hello.localhost",  # switching
        "] wait until worker is ready",  # switched, the worker's gate still running
        "] remove program/web@",  # draining and stopping the old release
    ],
)
def test_kill_9_mid_deploy_then_the_next_deploy_recovers(slot: Slot, marker: str) -> None:
    slot.deploy()
    slow: dict[str, tuple[int, str]] = {}
    request = threading.Thread(target=lambda: slow.update(r=slot.get("/slow?seconds=4")))
    if "route" in marker or "remove" in marker:
        # a request in flight on r1 keeps the deploy draining, so the kill lands mid-way
        router = RouterControl(slot.state, slot.port, slot.supervisor())
        request.start()
        eventually(lambda: router.status()["inflight"], what="the slow request in flight")
    slot.edit_spec('GREETING = "hello"', 'GREETING = "second"')
    proc = slot.spawn("deploy", "local")
    read_until(proc, marker)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    # still serving: the old release, or the new one fully live
    status, body = slot.get("/")
    assert status == 200 and body in ("hello from r1\n", "second from r2\n"), body
    assert [h["status"] for h in slot.history()] == ["deployed", "pending"]
    if request.is_alive() or slow:
        request.join(timeout=30)
        assert slow["r"] == (200, "hello from r1, slowly\n")  # the kill dropped nothing

    slot.edit_spec('GREETING = "second"', 'GREETING = "third"')
    r = slot.deploy()
    assert "broke the lock of slot 'local'" in r.out
    assert "that process is no longer running" in r.out
    assert "recovering: r2 was left pending" in r.out
    assert "re-asserting r1" in r.out
    assert slot.get("/") == (200, "third from r3\n")
    assert [(h["revision"], h["status"]) for h in slot.history()] == [
        (1, "superseded"),
        (2, "failed"),
        (3, "deployed"),
    ]
    # exactly the new release runs: nothing of r1 or of the interrupted r2 is left
    eventually(lambda: len(slot.programs()) == 2, what="only r3's two programs")
    assert {p["release"] for p in slot.processes().values()} == {"r3"}


def test_kill_9_of_a_first_deploy_then_deploy_succeeds(slot: Slot) -> None:
    proc = slot.spawn("deploy", "local")
    read_until(proc, "] wait until web is ready")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    r = slot.deploy()
    assert "recovering: r1 was left pending" in r.out
    assert "nothing was deployed before it" in r.out
    assert slot.get("/") == (200, "hello from r2\n")
    assert [h["status"] for h in slot.history()] == ["failed", "deployed"]
    eventually(lambda: len(slot.programs()) == 2, what="only r2's two programs")


def test_the_slots_own_router_not_answering_yet_is_waited_for_not_refused(slot: Slot) -> None:
    """The slot's router alive and holding its port but not answering yet (as right after a
    killed deploy started it, on a loaded machine: CI met it so) is waited for by the next
    deploy, which goes on once it answers; it is not refused as another program's port."""
    slot.deploy()
    programs = slot.supervisor().info()
    (pid,) = [info["pid"] for name, info in programs.items() if name.startswith("sw-router-")]
    slot.edit_spec('GREETING = "hello"', 'GREETING = "second"')
    os.kill(pid, signal.SIGSTOP)  # alive, never scheduled: its port held, no answer
    resume = threading.Timer(4.0, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        r = slot.deploy()
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
    assert "router port" not in r.text
    assert slot.get("/") == (200, "second from r2\n")


def test_two_concurrent_deploys_one_proceeds_the_other_exits_4(slot: Slot) -> None:
    slot.deploy()
    # the worker's readiness takes 15 s: the first deploy still holds the lock while the
    # second one starts, even on a loaded machine
    slot.edit_spec('initial_delay = "1s"', 'initial_delay = "15s"')
    first = slot.spawn("deploy", "local", "--force")
    read_until(first, "] update snapshot")  # it holds the lock now
    second = slot.run("deploy", "local")
    assert second.code == 4, second.text
    assert "slot 'local' is locked by" in second.err
    assert f"(pid {first.pid})" in second.err
    assert first.wait(timeout=120) == 0
    assert [h["status"] for h in slot.history()] == ["superseded", "deployed"]
    # after the first one finished, the lock is free again (to check: no changes)
    assert "no changes" in slot.deploy().out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_deploy_marks_it_failed_and_the_previous_release_serves(
    slot: Slot, sig: signal.Signals
) -> None:
    slot.deploy()
    slot.edit_spec('GREETING = "hello"', 'GREETING = "second"')
    # the worker must stay up 30 s to be ready (counted from its start, at step 3), so the
    # signal lands mid-wait even when this test reads the deploy's output late on a loaded
    # machine: with 6 s, the wait began 1 s after the start and the deploy rolled 5 s later,
    # before the signal came (a whole run, once; the deploy exited 0)
    slot.edit_spec('initial_delay = "1s"', 'initial_delay = "30s"')
    proc = slot.spawn("deploy", "local")
    read_until(proc, "] wait until worker is ready")  # r2's web is up beside r1's
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, out
    assert "marked failed; restoring r1" in out
    assert slot.get("/") == (200, "hello from r1\n")
    assert [h["status"] for h in slot.history()] == ["deployed", "failed"]
    # r2's processes were stopped; only r1's two programs run
    eventually(lambda: len(slot.programs()) == 2, what="only r1's two programs")
    assert {p["release"] for p in slot.processes().values()} == {"r1"}
    # the lock was released: the next deploy needs no recovery
    slot.edit_spec('GREETING = "second"', 'GREETING = "third"')
    slot.edit_spec('initial_delay = "30s"', 'initial_delay = "1s"')
    r = slot.deploy()
    assert "broke the lock" not in r.out and "recovering" not in r.out
    assert slot.get("/") == (200, "third from r3\n")
