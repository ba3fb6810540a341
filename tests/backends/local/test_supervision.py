"""Supervision: crashed processes come back (and status counts it); a targeted restart
touches only its process type; logs follow the processes."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.local.supervisor import Supervisor, program_conf, state_of
from tests.backends.local.conftest import Slot, eventually


def test_a_crashed_process_is_restarted_and_status_shows_it(slot: Slot) -> None:
    slot.deploy()
    web = slot.processes()["web"]
    assert web["restarts"] == 0
    os.kill(web["pid"], signal.SIGKILL)

    def restarted() -> dict[str, object] | None:
        row = slot.processes()["web"]
        return row if row["restarts"] == 1 and row["health"] == "ok" else None

    row = eventually(restarted, timeout=30, what="web to be restarted")
    assert row["pid"] != web["pid"]
    assert row["port"] == web["port"]  # same instance, same port: the route still holds
    assert slot.get("/") == (200, "hello from r1\n")
    r = slot.run("status", "local")
    assert "RESTARTS" in r.out and "UPTIME" in r.out


def test_targeted_restart_leaves_the_other_processes_alone(slot: Slot) -> None:
    slot.deploy()
    before = slot.processes()
    conf_dir = slot.state / "supervisor" / "programs"
    worker_conf = {p.name: p.read_bytes() for p in conf_dir.glob("sw.hello.local.worker.*")}
    r = slot.run("restart", "local", "web")
    assert r.code == 0, r.text
    assert "worker" not in r.out.split("rolled")[0].split("\n", 1)[1]  # no step touches it
    after = slot.processes()
    assert after["worker"]["pid"] == before["worker"]["pid"]
    assert after["worker"]["deployment_id"] == before["worker"]["deployment_id"]
    assert after["web"]["pid"] != before["web"]["pid"]
    assert after["web"]["deployment_id"] != before["web"]["deployment_id"]
    assert {p.name: p.read_bytes() for p in conf_dir.glob("sw.hello.local.worker.*")} == (
        worker_conf
    )
    assert slot.get("/") == (200, "hello from r2\n")
    assert slot.history()[-1]["description"] == "restart web"


def test_logs_prints_and_follows(slot: Slot) -> None:
    slot.deploy()
    slot.get("/")
    r = slot.run("logs", "local", "web", "-n", "5")
    assert r.code == 0, r.text
    assert 'web.1@r1 | 127.0.0.1 "GET / HTTP/1.1" 200' in r.out
    assert "worker" not in r.out
    slot.env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT prints every thread's stack
    follower = slot.spawn("logs", "local", "-f", "-n", "0")
    assert follower.stdout is not None
    seen = ""

    def got_line() -> bool:
        nonlocal seen
        slot.get("/followed")
        while select.select([follower.stdout], [], [], 0.1)[0]:
            seen += follower.stdout.readline()  # type: ignore[union-attr]
            if "/followed" in seen:
                return True
        return False

    eventually(got_line, what="the followed request in logs -f")
    follower.send_signal(signal.SIGINT)
    # read on to its end, as a terminal would: a follower whose output pipe is full (the
    # slot's processes kept logging while the test stopped reading) blocks in its last
    # flush and never exits — what three whole runs met, waiting without reading
    try:
        follower.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # where it is stuck, for whoever reads the failure
        status = Path(f"/proc/{follower.pid}/status").read_text().splitlines()
        masks = [s for s in status if s.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigIgn"))]
        follower.send_signal(signal.SIGABRT)
        said = follower.communicate(timeout=10)[0] or ""
        pytest.fail(f"logs -f did not exit 30 s after SIGINT ({masks}); its stacks:\n"
                    f"{said[-6000:]}")
    assert follower.returncode == 0


def test_starting_a_program_with_one_replica_down_leaves_the_running_one_alone(
    slot: Slot,
) -> None:
    slot.edit_spec(
        '[processes.web]\ncommand = "python3 app.py"\n',
        '[processes.web]\ncommand = "python3 app.py"\nreplicas = 2\n',
    )
    slot.deploy()
    first = {r["process"]: r for r in slot.status()["processes"]}
    # web.1 crashed once long ago (supervisord restarted it): that start is not held
    # against it by the health gate of the repair
    os.kill(first["web.1"]["pid"], signal.SIGKILL)

    def web1_back() -> dict[str, Any] | None:
        rows = {r["process"]: r for r in slot.status()["processes"]}
        ok = rows["web.1"]["restarts"] == 1 and rows["web.1"]["health"] == "ok"
        return rows if ok else None

    before = eventually(web1_back, timeout=30, what="web.1 to be restarted")
    # web.2 goes down and stays down (supervisord stops it: nothing restarts it)
    (down,) = [
        n for n in slot.programs() if n.startswith("sw.hello.local.web.") and n.endswith(".1")
    ]
    slot.supervisor().stop(down)
    eventually(
        lambda: (
            {r["process"]: r for r in slot.status()["processes"]}["web.2"]["state"] == "stopped"
        ),
        what="web.2 to be stopped",
    )
    plan = slot.run("plan", "local", "--repair")
    assert plan.code == 0 and "start program/web@" in plan.out, plan.text

    r = slot.run("repair", "local")
    assert r.code == 0, r.text
    after = {r["process"]: r for r in slot.status()["processes"]}
    # the running replica: same process, same port, never restarted
    assert (after["web.1"]["pid"], after["web.1"]["port"]) == (
        before["web.1"]["pid"],
        before["web.1"]["port"],
    )
    assert after["web.1"]["restarts"] == 1
    # the one that was down: started again on its recorded port (the route points there)
    assert after["web.2"]["port"] == before["web.2"]["port"]
    assert after["web.2"]["pid"] not in (None, before["web.2"]["pid"])
    assert after["web.2"]["health"] == "ok"
    assert after["worker"]["pid"] == before["worker"]["pid"]
    assert slot.get("/") == (200, "hello from r1\n")


IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('up', flush=True); time.sleep(600)"
)


@pytest.mark.parametrize("code", ["import time; time.sleep(600)", IGNORES_TERM])
def test_a_stop_returns_once_the_process_is_gone_and_kills_one_ignoring_term(
    tmp_path: Path, code: str
) -> None:
    """A stop asks supervisord without waiting and then watches: it must still end only
    once the process is gone (reaped), and a process ignoring TERM is killed after its
    stopwaitsecs, as supervisord's own waiting stop does."""
    supervisor = Supervisor(tmp_path / "supervisor")
    supervisor.ensure()
    try:
        conf = program_conf(
            "sw.t", [sys.executable, "-c", code], tmp_path, tmp_path / "t.log", stopwaitsecs=1
        )
        supervisor.add("sw.t", conf)
        info = eventually(
            lambda: (i := supervisor.info().get("sw.t")) and i["statename"] == "RUNNING" and i,
            what="the program running",
        )
        pid = int(info["pid"])
        eventually(lambda: "up" in (tmp_path / "t.log").read_text() or code != IGNORES_TERM,
                   what="its TERM handler set")  # fmt: skip
        supervisor.stop("sw.t", stopwaitsecs=1)
        assert state_of(supervisor.info().get("sw.t")) == "STOPPED"
        assert not Path(f"/proc/{pid}").exists()  # gone and reaped, not a zombie
        if code == IGNORES_TERM:
            assert "(terminated by SIGKILL" in supervisor.logfile.read_text()
        supervisor.stop("sw.t")  # nothing left to stop: says nothing
        supervisor.stop("sw.unknown")
    finally:
        supervisor.shutdown()
