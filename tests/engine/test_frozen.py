"""Invariant 19 through the Python API: a frozen slot refuses every function that changes
it — before the backend is touched — and the freeze itself can still be changed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shipway import api
from shipway.backends.memory import MemoryBackend
from shipway.errors import SlotFrozen
from shipway.guard import breaking_glass
from shipway.spec import App
from tests.conftest import app_from_toml
from tests.engine.test_sequencing import SPEC

TODAY = datetime.now(UTC).date()
WINDOW = (
    f'freeze = [{{ start = "{TODAY - timedelta(days=1)}", end = "{TODAY + timedelta(days=1)}", '
    'reason = "release train" }]\n'
)


@pytest.fixture
def frozen() -> App:
    text = SPEC.replace(
        '[slots.prod]\nrole = "production"\n', f'[slots.prod]\nrole = "production"\n{WINDOW}'
    )
    text = text.replace("[slots.test1]\n", f"[slots.test1]\n{WINDOW}")
    return app_from_toml(text)


CALLS: dict[str, Callable[[App, MemoryBackend], Any]] = {
    "deploy": lambda a, b: api.deploy(a, "prod", confirm="prod", image="reg/shop:2", backend=b),
    "build": lambda a, b: api.build(a, "prod", confirm="prod", backend=b),
    "repair": lambda a, b: api.repair(a, "prod", confirm="prod", backend=b),
    "rollback": lambda a, b: api.rollback(a, "prod", 1, confirm="prod", backend=b),
    "restart": lambda a, b: api.restart(a, "prod", "web", confirm="prod", backend=b),
    "promote into it": lambda a, b: api.promote(
        a, "test1", confirm="prod", backend=b, source_backend=MemoryBackend()
    ),
    "set-image": lambda a, b: api.set_image(
        a, "prod", "Deployment/x", "x:2", confirm="prod", backend=b
    ),
    "stop": lambda a, b: api.stop(a, "prod", confirm="prod", backend=b),
    "destroy": lambda a, b: api.destroy(a, "prod", confirm="prod", backend=b),
    "run": lambda a, b: api.run(a, "prod", ["true"], confirm="prod", backend=b),
    "switch": lambda a, b: api.switch(a, "prod", "g1", confirm="prod", backend=b),
    "gc": lambda a, b: api.gc(a, "prod", 1, confirm="prod", backend=b),
}


@pytest.mark.parametrize("name", CALLS)
def test_every_change_to_a_frozen_slot_is_refused_before_anything_is_touched(
    frozen: App, name: str
) -> None:
    backend = MemoryBackend()
    with pytest.raises(SlotFrozen, match="release train") as refused:
        CALLS[name](frozen, backend)
    assert refused.value.exit_code == 8
    assert backend.mutations() == []


def test_break_glass_lets_one_deploy_through_and_it_is_recorded(
    frozen: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHOP_TOKEN", "tok-1")
    backend = MemoryBackend()
    with breaking_glass("hotfix"):
        outcome = api.deploy(
            frozen, "prod", confirm="prod", image="reg/shop:2", backend=backend, reporter=None
        )
    assert outcome.ok
    assert backend.records[1].audit is not None
    assert backend.records[1].audit.break_glass == "hotfix"
