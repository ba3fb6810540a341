"""The generation commands (wake, sleep, gc) and ``restore`` are told as a deploy is, on the
local backend with real processes and a real HTTP receiver: one message per outcome each,
their ``-o json`` the stream's ``ended`` result."""

from __future__ import annotations

import json
from pathlib import Path

from tests.backends.local.conftest import Slot, eventually
from tests.backends.local.test_backups import backed_up, redis, redis_slot
from tests.backends.local.test_generations import BLUE_GREEN, deploy_greeting, gens, states
from tests.cli.test_notify import KEY, Receiver, receiver, signed, with_receivers
from tests.cli.test_told_operations import ended_of, stream, told_to

__all__ = ["receiver"]  # the fixture, used by name


def test_wake_sleep_and_gc_are_told_once_each(slot: Slot, receiver: Receiver) -> None:
    slot.spec.write_text(slot.spec.read_text() + BLUE_GREEN)
    slot.deploy()
    deploy_greeting(slot, "two")
    old = gens(slot)[0]["name"]
    eventually(lambda: states(slot)[old] == "asleep", what=f"{old} asleep")
    with_receivers(slot, receiver, None, "/hook")
    events = slot.app_dir.parent / "events.jsonl"
    slot.env["SHIPWAY_EVENTS"] = str(events)

    for verb, args in (("wake", [old]), ("sleep", [old]), ("gc", ["--keep", "0"])):
        r = slot.run(verb, "local", *args, "-o", "json")
        assert r.code == 0, r.text
        assert json.loads(r.out) == ended_of(stream(events), verb)["result"]
        if verb == "wake":
            assert states(slot)[old] == "awake"
    assert old not in states(slot)  # gc deleted it
    assert told_to(receiver, 3) == [("wake", "done"), ("sleep", "done"), ("gc", "done")]
    assert receiver.bodies("/hook")[2]["result"]["deleted"] == [old]
    assert len({h["X-Shipway-Delivery"] for _, h, _ in receiver.got}) == 3


def test_a_restore_is_told_once(slot: Slot, receiver: Receiver, tmp_path: Path) -> None:
    redis_slot(slot)
    slot.deploy()
    assert "+OK" in redis(slot, "SET", "greeting", "kept")
    path = Path(str(backed_up(slot, "cache", tmp_path)["path"]))
    assert "+OK" in redis(slot, "SET", "greeting", "replaced")
    # its spec ends in [secrets]: the signing key joins them, the receiver follows
    slot.spec.write_text(
        slot.spec.read_text()
        + 'HOOK_KEY = { from_env = "HOOK_KEY" }\n'
        + f'[[notify]]\nurl = "http://127.0.0.1:{receiver.port}/hook"\nsecret = "HOOK_KEY"\n'
    )
    slot.env.update(HOOK_KEY=KEY, SHIPWAY_NOTIFY_BUDGET="3")
    events = slot.app_dir.parent / "events.jsonl"
    slot.env["SHIPWAY_EVENTS"] = str(events)
    r = slot.run("restore", "local", "cache", str(path), "--confirm", "local", "-o", "json")
    assert r.code == 0, r.text
    doc = json.loads(r.out)
    assert doc == ended_of(stream(events), "restore")["result"] and doc["accessory"] == "cache"
    assert "kept" in redis(slot, "GET", "greeting")  # it was done (a one-off: told too)
    assert told_to(receiver, 2) == [("restore", "done"), ("run", "done")]
    assert signed(*receiver.got[0][1:])
