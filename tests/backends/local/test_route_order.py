"""A route moves once the process it routes to passed its gate, not every process.

The web's route switches as soon as the new web is ready; a worker's gate (here an uptime
of a few seconds) goes on after the switch, before anything old is stopped. So a worker
that fails then still finds the old web running, and the routes go back to it
(``rolled-back``); a worker that crashed before the web was ready stops the switch itself.
"""

from __future__ import annotations

from tests.backends.local.conftest import Slot, eventually
from tests.backends.local.test_interruptions import read_until

WORKER_GATE = 'initial_delay = "1s"'


def test_the_new_web_serves_while_the_workers_gate_still_runs(slot: Slot) -> None:
    slot.edit_spec(WORKER_GATE, 'initial_delay = "4s"')
    slot.deploy()
    slot.edit_spec('GREETING = "hello"', 'GREETING = "second"')
    proc = slot.spawn("deploy", "local")
    seen = read_until(proc, "] wait until worker is ready")
    assert "] update route/hello.localhost" in seen  # the switch came first
    assert slot.get("/") == (200, "second from r2\n")
    assert proc.wait(timeout=120) == 0
    assert [h["status"] for h in slot.history()] == ["superseded", "deployed"]
    eventually(lambda: len(slot.programs()) == 2, what="only r2's two programs")


def test_a_worker_failing_after_the_switch_switches_back_to_the_old_web(slot: Slot) -> None:
    slot.edit_spec(WORKER_GATE, 'initial_delay = "4s"')
    slot.deploy()
    web_before = slot.processes()["web"]["pid"]
    slot.edit_spec('GREETING = "hello"', 'GREETING = "second"')
    slot.edit_spec(
        'command = "python3 worker.py"',
        "command = \"python3 -c 'import time; time.sleep(1.5); raise SystemExit(4)'\"",
    )
    proc = slot.spawn("deploy", "local")
    read_until(proc, "] wait until worker is ready")
    served = slot.get("/")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 10, out
    assert "rolled back hello/local: r2 failed (worker: Crashed" in out
    assert "exited with code 4" in out
    assert served == (200, "second from r2\n")  # it had moved
    assert slot.get("/") == (200, "hello from r1\n")  # and is back on r1's web, never stopped
    assert slot.processes()["web"]["pid"] == web_before
    assert [h["status"] for h in slot.history()] == ["deployed", "failed"]
    eventually(lambda: len(slot.programs()) == 2, what="only r1's two programs")


def test_a_worker_that_crashed_before_the_web_was_ready_stops_the_switch(slot: Slot) -> None:
    slot.deploy()
    # the web answers its check only after 3 s; the worker exits at once
    slot.edit_spec('path = "/up"', 'path = "/up"\ninitial_delay = "3s"')
    slot.edit_spec(
        'command = "python3 worker.py"',
        "command = \"python3 -c 'raise SystemExit(3)'\"",
    )
    r = slot.deploy(expect=10)
    assert "] update route/" not in r.out  # the route never moved
    assert "worker: Crashed" in r.out
    assert "rolled back hello/local: r2 failed (worker: Crashed" in r.out
    assert slot.get("/") == (200, "hello from r1\n")
