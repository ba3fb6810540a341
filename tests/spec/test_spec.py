from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from shipway.errors import InputError, SecretUnavailable, SpecInvalid, UnknownSlot
from shipway.spec import Secret, SecretRef, load
from shipway.spec.parse import from_snapshot
from shipway.spec.secrets import redact, resolve_all, reveal
from tests.conftest import app_from_toml

FULL = (Path(__file__).parent / "cases" / "valid_full.toml").read_text()


def test_a_spec_without_slots_gets_a_local_slot() -> None:
    app = app_from_toml('[app]\nname="a"\n[processes.web]\ncommand="x"\n')
    assert app.slots.names() == ["local"]
    assert app.slots.get("local").backend == "local"


def test_yaml_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "shipway.yaml").write_text(
        "app: {name: hello}\nprocesses:\n  web: {command: python3 app.py, port: 8000}\n"
    )
    app = load(tmp_path)
    assert app.processes["web"].port == 8000


def test_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    spec = tmp_path / "shipway.toml"
    spec.write_text("[app]\nname = \n")
    with pytest.raises(SpecInvalid) as err:
        load(spec)
    assert "not valid TOML" in str(err.value)
    assert "line 2" in str(err.value)


def test_missing_spec_says_how_to_point_at_one(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="-f PATH"):
        load(tmp_path)


def test_slot_overrides_apply_in_slot(tmp_path: Path) -> None:
    app = app_from_toml(FULL, tmp_path)
    prod = app.in_slot("prod")
    assert prod.processes["web"].replicas == 4
    assert prod.processes["worker"].replicas == 1
    assert prod.env["DEBUG"] == "false"
    test1 = app.in_slot("test1")
    assert [r.host for r in test1.routes] == ["test1.shop.example.com"]
    assert [r.host for r in prod.routes] == ["shop.example.com"]


def test_kubernetes_namespace_defaults_to_app_and_slot() -> None:
    app = app_from_toml(
        '[app]\nname="a"\nimage="i"\n[processes.web]\nport=80\n[slots.qa]\nbackend="kubernetes"\n'
    )
    assert app.slots.get("qa").namespace == "a-qa"


def test_unknown_slot_lists_known_ones(tmp_path: Path) -> None:
    app = app_from_toml(FULL, tmp_path)
    with pytest.raises(UnknownSlot, match="test1, prod"):
        app.slots.get("staging")


def test_promotion_chain() -> None:
    app = app_from_toml(FULL)
    assert app.slots.chain("test1") == ["test1", "prod"]


def test_snapshot_parses_back_into_the_same_app(tmp_path: Path) -> None:
    app = app_from_toml(FULL, tmp_path)
    for slot in app.slots:
        view = app.in_slot(slot.name)
        snap = json.loads(json.dumps(view.snapshot(slot)))
        again = from_snapshot(snap, tmp_path)
        assert again.processes == view.processes
        assert again.routes == view.routes
        assert again.env == view.env
        assert again.secrets == view.secrets
        assert again.files == view.files
        assert again.image_type == view.image_type
        assert again.slots.get(slot.name).hosts == slot.hosts


def test_snapshot_holds_references_not_values(tmp_path: Path) -> None:
    app = app_from_toml(FULL, tmp_path)
    snap = json.dumps(app.snapshot())
    assert "SHOP_DATABASE_URL" in snap
    assert "from_file" in snap


def test_secret_never_shows_its_value() -> None:
    s = Secret("hunter22")
    assert "hunter22" not in str(s) + repr(s) + f"{s}" + str([s]) + str({"k": s})
    assert json.dumps({"k": str(s)}) == '{"k": "***"}'
    with pytest.raises(TypeError):
        pickle.dumps(s)
    assert s.reveal() == "hunter22"


def test_unresolvable_secrets_are_all_reported(tmp_path: Path) -> None:
    refs = {
        "A": SecretRef("A", from_env="NOPE_A"),
        "B": SecretRef("B", from_file=str(tmp_path / "missing")),
    }
    with pytest.raises(SecretUnavailable) as err:
        resolve_all(refs, environ={})
    assert "NOPE_A is not set" in str(err.value)
    assert "missing does not exist" in str(err.value)


def test_secrets_resolve_and_substitute_only_at_reveal(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t0ken-value\n")
    refs = {
        "DB": SecretRef("DB", from_env="DBURL"),
        "TOKEN": SecretRef("TOKEN", from_file=str(tmp_path / "token")),
    }
    values = resolve_all(refs, environ={"DBURL": "postgres://u:pw@db/x"})
    body = {"env": {"DB": "${secrets.DB}"}, "file": "token=${secrets.TOKEN}\n"}
    assert reveal(body, values) == {
        "env": {"DB": "postgres://u:pw@db/x"},
        "file": "token=t0ken-value\n",
    }
    assert redact("connect postgres://u:pw@db/x failed", values) == "connect *** failed"


def test_config_hash_follows_secret_values_without_holding_them(tmp_path: Path) -> None:
    app = app_from_toml(FULL, tmp_path)
    one = app.config_hash({"DATABASE_URL": Secret("a"), "API_TOKEN": Secret("b")})
    two = app.config_hash({"DATABASE_URL": Secret("a"), "API_TOKEN": Secret("c")})
    assert one != two
    assert one == app.config_hash({"DATABASE_URL": Secret("a"), "API_TOKEN": Secret("b")})


def test_secret_bearing_files_are_marked(tmp_path: Path) -> None:
    app = app_from_toml(FULL, tmp_path)
    files = {f.path: f for f in app.files}
    assert files["config/app.ini"].secret_bearing
    assert files["config/app.ini"].secrets == ("API_TOKEN",)
    assert not files["config/plain.txt"].secret_bearing


def test_literal_secret_value_is_never_echoed() -> None:
    with pytest.raises(SpecInvalid) as err:
        app_from_toml('[app]\nname="a"\n[processes.w]\ncommand="x"\n[secrets]\nK="s3cr3t-v4lue"\n')
    assert "s3cr3t-v4lue" not in str(err.value)
    assert "from_env" in str(err.value)


def test_a_secret_value_typed_as_from_env_is_never_echoed() -> None:
    spec = '[app]\nname="a"\n[processes.w]\ncommand="x"\n[secrets]\nDB={ from_env = "%s" }\n'
    with pytest.raises(SpecInvalid) as err:
        app_from_toml(spec % "postgres://u:hunter2@db/x")
    assert "hunter2" not in str(err.value)
    assert "secrets.DB.from_env" in str(err.value) and 'from_env = "DB"' in str(err.value)


def test_release_timeout_defaults_is_bounded_and_survives_the_snapshot(tmp_path: Path) -> None:
    base = '[app]\nname="a"\nrelease_command="migrate"\n{extra}[processes.web]\nport=80\n'
    assert app_from_toml(base.format(extra="")).release_deadline == 300.0
    app = app_from_toml(base.format(extra='release_timeout="20m"\n'))
    assert app.release_deadline == 1200.0
    again = from_snapshot(json.loads(json.dumps(app.snapshot())), tmp_path)
    assert again.release_deadline == 1200.0
    with pytest.raises(SpecInvalid) as err:
        app_from_toml(base.format(extra='release_timeout="7h"\n'))
    assert "app.release_timeout" in str(err.value) and "longer than 6h" in str(err.value)


def test_build_timeout_defaults_is_bounded_and_survives_the_snapshot(tmp_path: Path) -> None:
    base = '[app]\nname="a"\n{extra}[processes.web]\nport=80\n'
    assert app_from_toml(base.format(extra="")).build_deadline == 1800.0
    app = app_from_toml(base.format(extra='build_timeout="2h"\n'))
    assert app.build_deadline == 7200.0
    again = from_snapshot(json.loads(json.dumps(app.snapshot())), tmp_path)
    assert again.build_deadline == 7200.0
    with pytest.raises(SpecInvalid) as err:
        app_from_toml(base.format(extra='build_timeout="7h"\n'))
    assert "app.build_timeout" in str(err.value) and "longer than 6h" in str(err.value)
