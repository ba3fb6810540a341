"""Pure: what a deploy plans for the app's accessories against what the slot runs."""

from __future__ import annotations

import json

import pytest

from shipway.errors import InputError
from shipway.plan.accessories import SeenAccessory, accessory_steps, undeclared_notes
from shipway.plan.model import Plan, StartAccessory, step_from_json
from shipway.spec.accessories import Accessory, from_json

DB = Accessory("db", "postgres", "15")


def seen(a: Accessory, running: bool = True, version: str | None = None) -> SeenAccessory:
    return SeenAccessory(a.name, a.kind, version or a.version, a.digest(), running, a.to_json())


def test_a_missing_accessory_is_created_and_one_running_as_declared_is_left_alone() -> None:
    (step,) = accessory_steps({"db": DB}, {}, "shipway.toml")
    assert (step.action, step.accessory, step.kind, step.version) == (
        "create",
        "db",
        "postgres",
        "15",
    )
    assert step.describe().startswith("create accessory db (postgres 15)")
    assert from_json("db", json.loads(step.declaration)) == DB
    assert accessory_steps({"db": DB}, {"db": seen(DB)}, "shipway.toml") == []


def test_a_stopped_one_is_started_and_a_changed_declaration_costs_a_restart() -> None:
    (start,) = accessory_steps({"db": DB}, {"db": seen(DB, running=False)}, "shipway.toml")
    assert start.action == "start"
    mine = Accessory("mc", "custom", command=("memcached",), port=11211)
    moved = Accessory("mc", "custom", command=("memcached", "-m", "64"), port=11211)
    (restart,) = accessory_steps({"mc": moved}, {"mc": seen(mine)}, "shipway.toml")
    assert restart.action == "restart"
    assert "command" in restart.why and "restart" in restart.describe()
    assert "lose their connections" in restart.describe()


def test_a_major_version_change_is_refused_naming_the_flag_that_asks_for_it() -> None:
    with pytest.raises(InputError) as err:
        accessory_steps({"db": Accessory("db", "postgres", "16")}, {"db": seen(DB)}, "shipway.toml")
    text = str(err.value)
    assert err.value.exit_code == 2
    assert "shipway.toml: accessories.db.version" in text
    assert "--upgrade-accessory db" in text and 'keep version = "15"' in text
    assert "dump and restore" in text


def test_an_upgrade_asked_for_is_planned_as_a_dump_and_restore() -> None:
    pg16 = Accessory("db", "postgres", "16")
    (step,) = accessory_steps({"db": pg16}, {"db": seen(DB)}, "shipway.toml", upgrade=("db",))
    assert (step.action, step.version) == ("upgrade", "16")
    assert "15 -> 16" in step.why and "--upgrade-accessory db" in step.why
    assert "old data directory kept until the new server answers" in step.describe()
    assert step_from_json(step.to_json()) == step


def test_a_downgrade_and_an_unknown_name_are_refused_even_asked() -> None:
    pg14 = Accessory("db", "postgres", "14")
    with pytest.raises(InputError, match="never downgraded"):
        accessory_steps({"db": pg14}, {"db": seen(DB)}, "shipway.toml", upgrade=("db",))
    with pytest.raises(InputError, match=r"--upgrade-accessory dbb: shipway\.toml declares no"):
        accessory_steps({"db": DB}, {"db": seen(DB)}, "shipway.toml", upgrade=("dbb",))
    # asked for, but nothing changes: nothing is planned
    assert accessory_steps({"db": DB}, {"db": seen(DB)}, "shipway.toml", upgrade=("db",)) == []


R7, R8 = Accessory("cache", "redis", "7"), Accessory("cache", "redis", "8")


def test_a_redis_major_change_is_refused_unasked_and_planned_as_a_snapshot_when_asked() -> None:
    with pytest.raises(InputError) as err:
        accessory_steps({"cache": R8}, {"cache": seen(R7)}, "shipway.toml")
    text = str(err.value)
    assert err.value.exit_code == 2
    assert "shipway.toml: accessories.cache.version" in text
    assert "--upgrade-accessory cache" in text and 'keep version = "7"' in text
    assert "snapshot (as shipway backup takes it) loaded by a new redis 8 server" in text
    (step,) = accessory_steps(
        {"cache": R8}, {"cache": seen(R7)}, "shipway.toml", upgrade=("cache",)
    )
    assert (step.action, step.kind, step.version) == ("upgrade", "redis", "8")
    assert "7 -> 8, asked by --upgrade-accessory cache" in step.why
    line = step.describe()
    assert line.startswith("upgrade accessory cache (redis 8): 7 -> 8")
    assert "snapshotted (as shipway backup takes it)" in line and "old data directory kept" in line
    assert "dumped" not in line
    assert step_from_json(step.to_json()) == step


def test_a_redis_downgrade_is_refused_even_asked_saying_why() -> None:
    with pytest.raises(InputError) as err:
        accessory_steps({"cache": R7}, {"cache": seen(R8)}, "shipway.toml", upgrade=("cache",))
    text = str(err.value)
    assert err.value.exit_code == 2
    assert "never downgraded" in text and "cannot read a newer one's RDB" in text
    assert 'keep version = "8"' in text


def test_another_kind_on_the_same_data_is_refused() -> None:
    with pytest.raises(InputError, match=r"accessories\.db\.kind"):
        accessory_steps({"db": Accessory("db", "redis", "7")}, {"db": seen(DB)}, "shipway.toml")


def test_an_accessory_no_longer_declared_keeps_running_and_is_said() -> None:
    assert accessory_steps({}, {"db": seen(DB)}, "shipway.toml") == []
    (note,) = undeclared_notes({}, {"db": seen(DB)})
    assert "keeps running with its data" in note and "--volumes" in note


def test_the_step_round_trips_through_a_saved_plan() -> None:
    (step,) = accessory_steps({"db": DB}, {}, "shipway.toml")
    assert step_from_json(step.to_json()) == step
    plan = Plan("a", "s", "local", "deploy", (step,), {})
    assert Plan.from_json(plan.to_json()).steps == (step,)
    assert isinstance(plan.steps[0], StartAccessory)
