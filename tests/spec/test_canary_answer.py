"""``answer_timeout`` in ``[slots.X.canary]``: read, shown in the plan's rules, carried in the
release's spec snapshot only when set, and what the proxies' canary entries get from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shipway.plan.canary import rules_of
from shipway.plan.model import AnalyseCanary
from shipway.spec.canary import ANSWER_TIMEOUT, Canary, answer_timeout_entry
from tests.conftest import app_from_toml

SPEC = """\
[app]
name = "shop"

[processes.web]
command = "python3 app.py"
port = 8000

[slots.local]
strategy = "canary"
{table}
"""


def snapshot(tmp_path: Path, table: str) -> tuple[Canary, dict[str, Any]]:
    app = app_from_toml(SPEC.format(table=table), tmp_path)
    slot = app.slots.get("local")
    assert slot.canary is not None
    return slot.canary, app.in_slot("local").snapshot(slot)


@pytest.mark.parametrize(("said", "seconds"), [('"1.5s"', 1.5), ("2", 2.0), ('"10m"', 600.0)])
def test_a_set_answer_timeout_is_read_shown_and_carried(
    tmp_path: Path, said: str, seconds: float
) -> None:
    canary, snap = snapshot(tmp_path, f"canary = {{ answer_timeout = {said} }}")
    assert canary.answer_timeout == seconds
    assert f"not answered within {seconds:g}s" in " ".join(canary.rules())
    assert answer_timeout_entry(snap, "local") == {"answer_timeout": seconds}
    step = AnalyseCanary(percent=10, rules=json.dumps(canary.to_json()))
    assert rules_of(step).answer_timeout == seconds  # a saved plan keeps it


def test_the_default_is_30s_and_leaves_snapshots_and_entries_as_before(tmp_path: Path) -> None:
    canary, snap = snapshot(tmp_path, "")
    assert canary.answer_timeout == ANSWER_TIMEOUT == 30.0
    assert "answer_timeout" not in canary.to_json()
    assert answer_timeout_entry(snap, "local") == {}
    assert answer_timeout_entry({}, "local") == {}  # a release of before: no slots in it
