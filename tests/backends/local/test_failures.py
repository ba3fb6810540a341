"""Failed health gates and release commands: exit 10 (rolled back) or 12 (no anchor)."""

from __future__ import annotations

import json
import os
import socket

from tests.backends.local.conftest import Slot


def test_first_deploy_failing_its_health_check_is_no_anchor(slot: Slot) -> None:
    r = slot.deploy(expect=12, spec=slot.app_dir / "shipway-failing.toml")
    assert "nothing was running before it" in r.out
    # the message names the failing process and shows the last lines of its log
    assert "web: HealthcheckFailed: GET /up answered 500" in r.out
    assert "last lines of its log" in r.out
    assert "(HELLO_FAIL=1: failing on purpose)" in r.out
    # nothing half-made keeps running, and the failure is recorded
    assert slot.programs() == []
    assert [(h["revision"], h["status"]) for h in slot.history()] == [(1, "failed")]
    assert slot.get("/")[0] == 404


def test_failing_release_is_rolled_back_and_the_old_one_keeps_serving(slot: Slot) -> None:
    slot.deploy()
    before = slot.processes()
    r = slot.deploy(expect=10, spec=slot.app_dir / "shipway-failing.toml")
    assert "rolled back hello/local: r2 failed (web: HealthcheckFailed" in r.out
    assert "r1 is serving again" in r.out
    assert slot.get("/") == (200, "hello from r1\n")
    after = slot.processes()
    assert {p: row["pid"] for p, row in after.items()} == {
        p: row["pid"] for p, row in before.items()
    }
    assert len(slot.programs()) == 2  # r2's programs were stopped
    assert [(h["revision"], h["status"]) for h in slot.history()] == [
        (1, "deployed"),
        (2, "failed"),
    ]


def test_a_crashing_process_fails_the_gate_fast(slot: Slot) -> None:
    slot.deploy()
    slot.edit_spec('command = "python3 worker.py"', 'command = "python3 -c \'import sys; '
                   "print(\\\"worker cannot start\\\"); sys.exit(3)'\"")
    r = slot.run("deploy", "local", "-o", "json")
    assert r.code == 10, r.text
    doc = json.loads(r.out)
    assert doc["outcome"] == "rolled-back"
    assert doc["failure"]["process"] == "worker"
    assert doc["failure"]["reason"] == "Crashed"
    assert doc["failure"]["exit_code"] == 3
    assert any("worker cannot start" in line for line in doc["failure"]["details"])
    assert slot.get("/") == (200, "hello from r1\n")


def test_failing_release_command_rolls_back_before_any_switch(slot: Slot) -> None:
    slot.deploy()
    slot.edit_spec(
        'name = "hello"',
        'name = "hello"\nrelease_command = "python3 -c \'import sys; print(\\"migrating\\"); '
        "sys.exit(4)'\"",
    )
    r = slot.deploy(expect=10)
    assert "ReleaseCommandFailed" in r.out
    assert "exited with code 4" in r.out
    assert "(exit code 4)" not in r.out  # the code is said once
    assert "release | migrating" in r.out
    assert "] update route" not in r.out  # the release command runs before any switch
    assert slot.get("/") == (200, "hello from r1\n")


def test_release_command_runs_in_the_new_snapshot_before_the_switch(slot: Slot) -> None:
    slot.edit_spec(
        'name = "hello"',
        "name = \"hello\"\nrelease_command = \"python3 -c 'import os; "
        "open(\\\"migrated\\\", \\\"w\\\").write(os.environ[\\\"SHIPWAY_RELEASE\\\"])'\"",
    )
    r = slot.deploy()
    assert r.out.index("run the release command") < r.out.index("create route")
    migrated = slot.state / "hello" / "local" / "releases" / "r1" / "migrated"
    assert migrated.read_text() == "r1"


def test_bad_input_is_exit_2_and_touches_nothing(slot: Slot) -> None:
    slot.edit_spec("attempts = 25", "attempts = 0")
    r = slot.run("deploy", "local")
    assert r.code == 2, r.text
    assert "attempts" in r.err
    assert not slot.state.exists()
    assert slot.run("logs", "local", "nosuch").code == 2


def test_router_port_taken_by_another_program_is_refused_before_anything_moves(
    slot: Slot,
) -> None:
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", slot.port))
        squatter.listen()
        r = slot.deploy(expect=2)  # found while planning, not at the last step
    assert f"router port {slot.port} is held by pid {os.getpid()} (" in r.err
    assert "SHIPWAY_ROUTER_PORT" in r.err
    assert slot.programs() == []  # nothing was started
