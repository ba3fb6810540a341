"""SLOT may be left out of every command when the spec has one slot; with several, leaving
it out is an input error naming them (exit 2, nothing touched)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from shipway.cli.main import cli
from tests.backends.local.conftest import Slot, eventually
from tests.cli.conftest import TWO_SLOTS

#: every command that acts on a slot
SLOT_COMMANDS = ["plan", "diff", "deploy", "repair", "rollback", "restart", "promote", "status",
                 "history", "logs", "run", "set-image", "stop", "gens", "switch", "sleep", "wake",
                 "gc"]  # fmt: skip


def test_every_slot_command_takes_slot_as_optional() -> None:
    for name in SLOT_COMMANDS:
        command = cli.commands[name]
        slot = next(p for p in command.params if p.name == "slot")
        assert slot.required is False, name
        assert "[SLOT]" in " ".join(command.collect_usage_pieces(click.Context(command))), name


@pytest.mark.parametrize("command", SLOT_COMMANDS)
def test_without_slot_several_slots_are_named_and_nothing_is_touched(
    tmp_path: Path, command: str
) -> None:
    state = tmp_path / "state"
    spec = tmp_path / "shipway.toml"
    spec.write_text(TWO_SLOTS.format(state=state))
    result = CliRunner().invoke(cli, ["-f", str(spec), command])
    assert result.exit_code == 2, result.output
    assert "which slot? the spec declares 2: test1, prod" in result.stderr
    assert f"(hint: shipway -f {spec} {command} test1)" in result.stderr  # as typed
    assert not state.exists()  # nothing was opened, let alone changed


def test_one_slot_commands_run_without_slot(hello: Slot) -> None:
    assert "[slots" not in hello.spec.read_text()  # the implicit local slot only
    plan = hello.run("plan")
    assert plan.code == 0 and "deploy hello to slot local" in plan.out, plan.text
    assert hello.run("deploy").code == 0
    hello.edit_spec('GREETING = "hello"', 'GREETING = "hi"')
    second = hello.run("deploy")
    assert second.code == 0, second.text
    assert hello.run("status").out.startswith("hello/local (local): running\n  running r2,")

    # restart PROCESS: the one argument is the process, not a slot
    before = hello.processes()
    restarted = hello.run("restart", "worker")
    assert restarted.code == 0, restarted.text
    after = hello.processes()
    assert after["web"]["pid"] == before["web"]["pid"]
    assert after["worker"]["pid"] != before["worker"]["pid"]

    # rollback REVISION: the one argument is the revision
    assert hello.get("/")[1].startswith("hi from")
    rolled = hello.run("rollback", "1")
    assert rolled.code == 0 and "rolled hello/local" in rolled.out, rolled.text
    eventually(lambda: hello.get("/")[1].startswith("hello from"), what="r1's env serving")
    assert hello.run("history").out.count("\n") == 1 + len(hello.history())
    assert hello.run("logs", "web", "-n", "1").code == 0
    # run -- CMD: click drops the "--", so the command's first word is not taken for a slot
    ran = hello.run("run", "--", "sh", "-c", 'echo "$GREETING"; exit 3')
    assert ran.code == 3 and ran.out == "hello\n", ran.text
    bad = hello.run("restart", "nope")
    assert bad.code == 2 and "no process 'nope'" in bad.text, bad.text
    assert hello.run("stop").code == 0
    assert hello.run("status").code == 0
