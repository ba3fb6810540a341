"""A process that declares no port gets none: no PORT in its environment, no port held for
it, none in ``status``; one that declares a port still gets its own."""

from __future__ import annotations

import json

from tests.backends.local.conftest import Slot


def test_a_worker_without_a_port_is_given_none(slot: Slot) -> None:
    r = slot.deploy()
    assert "worker r1 starting (1 instance, no port)" in r.out, r.out
    rows = slot.processes()
    assert rows["worker"]["port"] is None and isinstance(rows["web"]["port"], int)
    env = json.loads(
        next((slot.state / "hello" / "local" / "run").glob("worker.*.env.json")).read_text()
    )
    assert "PORT" not in json.dumps(env)
    held = json.loads((slot.state / "ports.json").read_text())
    assert "worker" not in json.dumps(held) and "web" in json.dumps(held)
    assert slot.get("/")[0] == 200
