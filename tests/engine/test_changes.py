"""What a deploy changes, sequenced by the engine against the in-memory backend: "no
changes" applies nothing and records nothing (the lock held for the check only), unless
forced; what changed is in the plan, secrets named and never shown."""

from __future__ import annotations

import json
from typing import Any

from shipway.backends.memory import MemoryBackend
from shipway.engine import Rolled, Unchanged, outcome_from_json
from shipway.engine.request import DeployRequest
from shipway.guard import Guard
from shipway.plan import Plan
from shipway.plan.change import Change
from shipway.plan.diff import between
from shipway.release import codec
from shipway.spec import App
from tests.conftest import app_from_toml
from tests.engine.test_generations import SPEC as BLUE_GREEN
from tests.engine.test_sequencing import SPEC, Lines, deploy, engine

CANARY = "tok-canary-2718281828-never-shown"


def mutations_but_the_lock(backend: MemoryBackend) -> list[tuple[str, str]]:
    return [c for c in backend.mutations() if c[0] != "lock"]


def test_an_unchanged_slot_plans_no_changes_and_deploy_records_nothing(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    assert isinstance(deploy(app, backend, out), Rolled)
    the_plan = engine(backend, out).plan_deploy(app, "test1", DeployRequest(image="reg/shop:1"))
    assert the_plan.unchanged and not the_plan.mutates and the_plan.release is None
    assert the_plan.describe()[0] == "deploy shop to slot test1 (memory): no changes"
    assert the_plan.to_json()["no_changes"] is True and the_plan.to_json()["changes"] == []

    backend.calls.clear()
    outcome = deploy(app, backend, out)
    assert isinstance(outcome, Unchanged) and outcome.exit_code == 0
    assert outcome.revision == 1
    assert "no changes" in outcome.line() and "--force" in outcome.line()
    assert outcome_from_json(outcome.to_json()) == outcome
    assert sorted(backend.records) == [1]
    assert mutations_but_the_lock(backend) == []
    assert [c[0] for c in backend.calls][-1] == "unlock"  # held for the check only
    assert backend.lock_holder is None


def test_force_redeploys_an_unchanged_slot_with_fresh_ids(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    forced = engine(backend, out).plan_deploy(
        app, "test1", DeployRequest(image="reg/shop:1", force=True)
    )
    assert not forced.unchanged and forced.diff is not None and forced.diff.empty
    outcome = deploy(app, backend, out, force=True)
    assert isinstance(outcome, Rolled) and outcome.to_revision == 2
    assert backend.records[2].deployment_ids != backend.records[1].deployment_ids


def test_an_env_change_shows_old_and_new(app: App, backend: MemoryBackend, out: Lines) -> None:
    deploy(app, backend, out)
    changed = app_from_toml(SPEC.replace("[secrets]", '[env]\nLOG_LEVEL = "debug"\n\n[secrets]'))
    the_plan = engine(backend, out).plan_deploy(changed, "test1", DeployRequest(image="reg/shop:1"))
    assert the_plan.diff is not None and the_plan.mutates
    assert the_plan.diff.changes == (Change("app", "env.LOG_LEVEL", "added", None, "debug"),)
    assert '    app: env LOG_LEVEL added: "debug"' in the_plan.describe()


def test_a_changed_secret_is_named_and_its_value_is_shown_nowhere(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    clearance = Guard(app.slots).clear("test1")
    first = engine(backend, out)
    first.environ = {"SHOP_TOKEN": "tok-canary-first-value-1414"}
    first.deploy(clearance, app, "test1", DeployRequest(image="reg/shop:1"))
    second = engine(backend, out)
    second.environ = {"SHOP_TOKEN": CANARY}
    the_plan = second.plan_deploy(app, "test1", DeployRequest(image="reg/shop:1"))
    assert the_plan.diff is not None
    assert the_plan.diff.changes == (Change("app", "env.TOKEN", "changed", masked=True),)
    assert "    app: env TOKEN (secret) changed" in the_plan.describe()
    text = "\n".join(the_plan.describe()) + json.dumps(the_plan.to_json())
    assert CANARY not in text and "tok-canary-first" not in text
    assert "secret_marks" not in json.dumps(the_plan.to_json())  # nothing to match a guess against
    assert isinstance(
        second.deploy(clearance, app, "test1", DeployRequest(image="reg/shop:1")), Rolled
    )
    stored = b"".join(codec.encode(r) for r in backend.records.values())
    stored += json.dumps([codec.to_json(r) for r in backend.records.values()]).encode()
    assert CANARY.encode() not in stored
    assert "\n".join(out.lines).count(CANARY) == 0
    # the records alone still tell which secret changed
    marks = [backend.records[n].secret_marks for n in (1, 2)]
    assert marks[0].salt == marks[1].salt and marks[0].same(marks[1], "TOKEN") is False


def test_a_saved_plan_of_no_changes_applies_nothing(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    saved = engine(backend, out).plan_deploy(app, "test1", DeployRequest(image="reg/shop:1"))
    again = Plan.from_json(json.loads(json.dumps(saved.to_json())))
    assert again.unchanged and again.diff == saved.diff
    outcome = deploy(app, backend, out, image=None, saved=again)
    assert isinstance(outcome, Unchanged) and sorted(backend.records) == [1]


def test_drift_is_a_change_and_the_deploy_rolls(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    backend.live["workload/worker"].state = "stopped"
    the_plan = engine(backend, out).plan_deploy(app, "test1", DeployRequest(image="reg/shop:1"))
    assert the_plan.diff is not None and not the_plan.unchanged
    assert the_plan.diff.changes == (Change("workload/worker", "live", "drifted", "stopped"),)
    assert "    workload/worker: drifted: stopped" in the_plan.describe()
    assert isinstance(deploy(app, backend, out), Rolled)


def test_diff_between_revisions_from_the_records_alone(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    deploy(app, backend, out, image="reg/shop:2")
    diff = engine(backend, out).changes(app, "test1")
    assert diff.before == 2 and diff.changes[0].field == "image"  # the spec names reg/shop:1
    records = list(backend.records.values())
    assert between(records, 2).summary() == "image reg/shop:1→reg/shop:2"
    assert between(records, 1).summary() == "first release"
    assert between(records, 2, 1).changes[0].new == "reg/shop:1"


def test_a_blue_green_slot_with_nothing_changed_makes_no_generation() -> None:
    app = app_from_toml(BLUE_GREEN)
    backend, out = MemoryBackend(), Lines()
    clearance = Guard(app.slots).clear("prod")
    assert isinstance(engine(backend, out).deploy(clearance, app, "prod"), Rolled)
    generations = len(backend.generations(app.slots.target("prod")))
    outcome: Any = engine(backend, out).deploy(clearance, app, "prod")
    assert isinstance(outcome, Unchanged)
    assert len(backend.generations(app.slots.target("prod"))) == generations
    assert sorted(backend.records) == [1]
