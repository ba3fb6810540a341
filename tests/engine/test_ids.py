from __future__ import annotations

from shipway.engine.ids import fresh_ids, restart_ids


def test_restart_ids_rules() -> None:
    ids = fresh_ids(["web", "worker"])
    assert ids["web"] == ids["worker"]
    again = restart_ids(ids, ["web", "worker", "clock"], ["web"])
    assert again["worker"] == ids["worker"]
    assert again["web"] != ids["web"]
    assert again["clock"] == again["web"]  # a process the record lacks gets the fresh id
    everyone = restart_ids(ids, ["web", "worker"], ["web", "worker"])
    assert everyone["web"] != ids["web"] and everyone["worker"] != ids["worker"]
