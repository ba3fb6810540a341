"""Operations that record no release — freeze, stop, run, build, unfreeze, destroy — are told as a
deploy is, on the local backend with real processes and a real HTTP receiver: one
``started`` and one ``ended`` in the event stream each, exactly one message per outcome, the
command's text and ``-o json`` printed from that ``ended`` event; ``--break-glass`` on a
frozen slot is in the ``started`` event and the message; ``status`` shows the freeze."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

import pytest

from tests.backends.local.conftest import Slot, eventually
from tests.cli.test_notify import Receiver, receiver, signed, with_receivers

__all__ = ["receiver"]  # the fixture, used by name


@pytest.fixture
def slot(hello: Slot) -> Slot:
    """The hello example on the local backend (tests/cli/conftest.py)."""
    return hello


def stream(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def ended_of(events: list[dict[str, Any]], operation: str) -> dict[str, Any]:
    """The one ``ended`` event of ``operation`` (after its one ``started``)."""
    started = [e for e in events if e["event"] == "started" and e["operation"] == operation]
    ended = [e for e in events if e["event"] == "ended" and e["operation"] == operation]
    assert len(started) == 1 and len(ended) == 1, (operation, started, ended)
    return ended[0]


def told_to(receiver: Receiver, count: int) -> list[tuple[str, str]]:
    """(operation, outcome) of the messages at ``/hook``, once ``count`` have come."""
    bodies = eventually(
        lambda: b if len(b := receiver.bodies("/hook")) >= count else None,
        what=f"{count} messages",
    )
    return [(b["operation"], b["outcome"]) for b in bodies]


def test_each_operation_is_told_once_from_one_stream_and_break_glass_is_told(
    slot: Slot, receiver: Receiver
) -> None:
    slot.edit_spec('name = "hello"\n', 'name = "hello"\nbuild = "true"\n')  # a build command
    slot.deploy()
    with_receivers(slot, receiver, None, "/hook")
    events = slot.app_dir.parent / "events.jsonl"
    slot.env["SHIPWAY_EVENTS"] = str(events)

    frozen = slot.run("freeze", "local", "--for", "1h", "--reason", "incident 5", "-o", "json")
    assert frozen.code == 0, frozen.text
    doc = json.loads(frozen.out)
    assert doc["outcome"] == "done" and doc["freezes"][0]["reason"] == "incident 5"
    assert doc == ended_of(stream(events), "freeze")["result"]  # -o json: the ended event's
    until = doc["freezes"][0]["until"]

    # status: the freeze (reason, until, who), read from the target
    status = slot.status()
    (shown,) = status["freezes"]
    assert (shown["reason"], shown["until"], shown["source"]) == ("incident 5", until, "target")
    assert shown["by"].startswith(getpass.getuser() + "@")
    text = slot.run("status", "local").out
    assert f"frozen until {until} (set, by {shown['by']}): incident 5" in text

    refused = slot.run("stop", "local")  # refused: nothing started, nothing told
    assert refused.code == 8 and "incident 5" in refused.err
    stopped = slot.run("stop", "local", "--break-glass", "drain for 5")
    assert stopped.code == 0, stopped.text
    told = ended_of(stream(events), "stop")
    # the text printed last: the ended event's line (a hint made pasteable: -f SPEC)
    last = stopped.out.splitlines()[-1]
    assert last.startswith(told["line"].removesuffix("(shipway history)")), last
    assert told["line"] == "stopped hello/local; its release records stay (shipway history)"
    assert slot.status()["state"] == "stopped"  # it was done, not only told

    # a one-off command: its stdout is its own; its exit code is told (a failure)
    code = "import sys; print('from the command'); sys.exit(3)"
    ran = slot.run("run", "local", "--break-glass", "look 5", "--", "python3", "-c", code)
    assert ran.code == 3, ran.text
    assert ran.out == "from the command\n"
    told = ended_of(stream(events), "run")
    assert told["outcome"] == "failed" and told["exit_code"] == 3
    assert told["line"] in ran.err.splitlines()

    built = slot.run("build", "local", "--break-glass", "build 5", "-o", "json")
    assert built.code == 0, built.text
    assert json.loads(built.out) == ended_of(stream(events), "build")["result"]
    assert json.loads(built.out)["kind"] == "environment"

    lifted = slot.run("unfreeze", "local", "-o", "json")
    assert lifted.code == 0, lifted.text
    assert json.loads(lifted.out) == ended_of(stream(events), "unfreeze")["result"]
    assert json.loads(lifted.out)["freezes"] == [] and slot.status()["freezes"] == []

    gone = slot.run("destroy", "local", "--confirm", "local", "-o", "json")
    assert gone.code == 0, gone.text
    doc = json.loads(gone.out)
    assert doc == ended_of(stream(events), "destroy")["result"] and doc["deleted"]

    # exactly one message per outcome, signed, in the order the commands ran
    assert told_to(receiver, 6) == [
        ("freeze", "done"),
        ("stop", "done"),
        ("run", "failed"),
        ("build", "done"),
        ("unfreeze", "done"),
        ("destroy", "done"),
    ]
    ids = [h["X-Shipway-Delivery"] for _, h, _ in receiver.got]
    assert len(ids) == len(set(ids)) == 6
    assert all(signed(h, body) for _, h, body in receiver.got)
    who = {b["operation"]: b["started"]["who"] for b in receiver.bodies("/hook")}
    assert who["stop"]["break_glass"] == "drain for 5" and who["stop"]["clearance"] == [
        "break-glass"
    ]
    assert who["run"]["break_glass"] == "look 5" and who["build"]["break_glass"] == "build 5"
    assert who["freeze"]["break_glass"] is None and who["destroy"]["break_glass"] is None
    assert who["destroy"]["clearance"] == ["confirm"]
    assert all(w["user"] == getpass.getuser() for w in who.values())
