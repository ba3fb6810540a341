"""After a deliberate ``stop``, ``plan`` says the slot is stopped — not that each of its
programs and routes drifted."""

from __future__ import annotations

from tests.backends.local.conftest import Slot


def test_plan_after_stop_says_stopped_not_drift(slot: Slot) -> None:
    slot.deploy()
    assert slot.run("stop", "local").code == 0
    r = slot.run("plan", "local")
    assert r.code == 0, r.text
    assert "    slot: stopped: nothing of the deployed release runs (shipway stop" in r.out, r.out
    assert "drifted" not in r.out
    slot.deploy()  # and it starts it again
    assert slot.get("/")[0] == 200
