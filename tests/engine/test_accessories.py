"""The engine and accessories, against the in-memory backend (pure sequencing): only a
deploy starts an accessory, before the build and the release command; a rollback, restart
or "no changes" deploy never names one; a backend that runs none refuses the spec (exit 2);
the link is a secret the app gets and no output shows."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest

from shipway import api
from shipway.backends.accessories import AccessoryStatus, link_name
from shipway.backends.memory import MemoryBackend
from shipway.backends.protocol import Failure, Reporter
from shipway.engine import Rolled, RolledBack, Unchanged
from shipway.errors import InputError
from shipway.guard import Clearance
from shipway.plan.model import StartAccessory
from shipway.spec.accessories import Accessory
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Secret
from tests.conftest import app_from_toml

SPEC = """
[app]
name = "shop"
image = "reg/shop:1"
release_command = "migrate"

[processes.web]
command = "serve"

[env]
EDITION = "1"

[accessories.db]
kind = "postgres"
version = "15"

[secrets]
DATABASE_URL = { from_accessory = "db" }

[slots.test1]
"""

PASSWORD = "s3cret-pw-made-once"


class WithAccessories(MemoryBackend):
    """The in-memory backend with accessories: what was started, in order."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.started: list[tuple[str, str]] = []
        self.running: dict[str, Accessory] = {}
        self.made = 0
        self.fail = fail
        self.down: set[str] = set()

    def accessory_problems(self, app: App, slot: Slot) -> list[str]:
        return []

    def accessories(self, target: Target) -> list[AccessoryStatus]:
        return [
            AccessoryStatus(
                n,
                a.kind,
                a.version,
                "down" if n in self.down else "running",
                n not in self.down,
                a.digest(),
                a.to_json(),
            )
            for n, a in self.running.items()
        ]

    def accessory_links(
        self, target: Target, declared: Mapping[str, Accessory], clearance: Clearance | None
    ) -> dict[str, Secret]:
        if clearance is not None and not self.made:
            self.made += 1
        if not self.made:
            return {}
        return {
            "db": Secret(f"postgresql://shipway:{PASSWORD}@127.0.0.1:5999/shop"),
            link_name("db"): Secret(PASSWORD),
        }

    def start_accessory(
        self,
        clearance: Clearance,
        target: Target,
        step: StartAccessory,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        clearance.require_covers(target)
        assert time.monotonic() < deadline
        self.started.append((step.accessory, step.action))
        if self.fail:
            from shipway.backends.protocol import Reason

            return Failure(Reason.STEP_FAILED, f"db did not answer ({PASSWORD})")
        self.running[step.accessory] = Accessory("db", "postgres", step.version)
        self.down.discard(step.accessory)
        return None


def test_only_a_deploy_starts_it_first_and_nothing_else_names_it() -> None:
    backend = WithAccessories()
    app = app_from_toml(SPEC)
    plan = api.plan(app, "test1", backend=backend)
    names = [type(s).__name__ for s in plan.steps]
    assert names[0] == "StartAccessory"
    assert names.index("RunReleaseCommand") > 0
    assert PASSWORD not in "\n".join(plan.describe())
    assert isinstance(api.deploy(app, "test1", backend=backend), Rolled)
    assert backend.started == [("db", "create")]
    assert backend.made == 1
    # the app got the link as its secret (the placeholder revealed when applied)
    assert any(PASSWORD in str(live.revealed) for live in backend.live.values())
    again = app_from_toml(SPEC.replace('EDITION = "1"', 'EDITION = "2"'))
    plan = api.plan(again, "test1", backend=backend)
    assert not any(isinstance(s, StartAccessory) for s in plan.steps)
    assert isinstance(api.deploy(again, "test1", backend=backend), Rolled)
    assert isinstance(api.rollback(again, "test1", 1, backend=backend), Rolled)
    assert isinstance(api.restart(again, "test1", "web", backend=backend), Rolled)
    assert api.plan(again, "test1", backend=backend) is not None
    assert backend.started == [("db", "create")]  # never again
    assert backend.made == 1


def test_a_failed_accessory_start_rolls_back_and_its_output_is_masked() -> None:
    backend = WithAccessories(fail=True)
    app = app_from_toml(SPEC)
    outcome = api.deploy(app, "test1", backend=backend)
    assert not isinstance(outcome, Rolled)
    assert PASSWORD not in outcome.line()
    assert PASSWORD not in str(outcome.to_json())
    assert not isinstance(outcome, RolledBack)  # nothing ran before: no anchor


def test_a_backend_that_runs_no_accessories_refuses_the_spec_with_exit_2() -> None:
    with pytest.raises(InputError) as err:
        api.plan(app_from_toml(SPEC), "test1", backend=MemoryBackend())
    assert err.value.exit_code == 2
    assert "does not run accessories" in str(err.value)
    assert "local" in str(err.value)


def test_a_stopped_accessory_is_started_and_the_unchanged_app_is_no_changes() -> None:
    backend = WithAccessories()
    app = app_from_toml(SPEC)
    assert isinstance(api.deploy(app, "test1", backend=backend), Rolled)
    backend.down.add("db")  # its server stopped (a crash, a reboot, by hand)
    plan = api.plan(app, "test1", backend=backend)
    assert [(type(s).__name__, getattr(s, "action", "")) for s in plan.steps] == [
        ("StartAccessory", "start")
    ]
    assert plan.unchanged and plan.release is None
    assert plan.describe()[0].endswith(": no changes to the app")
    assert "start accessory db (postgres 15)" in plan.describe()[1]
    outcome = api.deploy(app, "test1", backend=backend)
    assert isinstance(outcome, Unchanged), outcome
    assert outcome.accessories_started == ("db",)
    assert "started accessory db" in outcome.line()
    assert outcome.to_json()["accessories_started"] == ["db"]
    assert backend.started == [("db", "create"), ("db", "start")]
    assert [r.revision for r in api.history(app, "test1", backend=backend)] == [1]
    # running again: a plain "no changes", nothing started
    again = api.deploy(app, "test1", backend=backend)
    assert isinstance(again, Unchanged) and again.accessories_started == ()
    assert api.plan(app, "test1", backend=backend).describe()[0].endswith(": no changes")
    assert backend.started == [("db", "create"), ("db", "start")]
