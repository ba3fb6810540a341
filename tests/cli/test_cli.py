from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import shipway.cli.deploy
from shipway.cli.main import cli

SPEC = """
[app]
name = "shop"
[processes.web]
command = "serve"
port = 8000
[slots.test1]
promotes_to = "prod"
[slots.prod]
role = "production"
"""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "shipway.toml"
    path.write_text(SPEC)
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_help_documents_the_exit_codes() -> None:
    code, out, _ = run("--help")
    assert code == 0
    for line in ("3   refused by the guard", "4   the slot is locked", "10  rolled-back",
                 "11  rollback-failed", "12  no-anchor"):  # fmt: skip
        assert line in out


def test_validate_ok(spec: Path) -> None:
    code, out, _ = run("-f", str(spec), "validate")
    assert code == 0
    assert "ok: shop" in out and "prod (local, guarded)" in out


def test_validate_prints_every_error_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "shipway.toml"
    bad.write_text('[app]\nname = "Bad Name"\n[processes.web]\nport = "x"\ncommand = "s"\n')
    code, _, err = run("-f", str(bad), "validate")
    assert code == 2
    assert "2 errors in the spec" in err
    assert "shipway.toml:2: app.name" in err and "shipway.toml:4: processes.web.port" in err


def test_validate_json_lists_problems(tmp_path: Path) -> None:
    bad = tmp_path / "shipway.toml"
    bad.write_text('[app]\nname = "x"\nnmae = 1\n[processes.web]\ncommand = "s"\n')
    code, out, _ = run("-f", str(bad), "validate", "-o", "json")
    assert code == 2
    problems = json.loads(out)["error"]["problems"]
    assert problems == [{"file": "shipway.toml", "path": "app.nmae", "line": 3,
                         "message": "unknown key", "hint": "did you mean 'name'?"}]  # fmt: skip


@pytest.mark.parametrize("command", [["deploy", "prod"], ["restart", "prod", "web"],
                                     ["rollback", "prod"], ["promote", "test1"]])  # fmt: skip
def test_production_slot_refused_without_confirmation(spec: Path, command: list[str]) -> None:
    code, _, err = run("-f", str(spec), *command)
    assert code == 3
    assert "--confirm prod" in err


def test_wrong_confirmation_is_refused(spec: Path) -> None:
    code, out, err = run("-f", str(spec), "deploy", "prod", "--confirm", "test1", "-o", "json")
    assert code == 3
    assert "does not match slot 'prod'" in err
    assert json.loads(out)["error"]["exit_code"] == 3


def test_unknown_slot_is_invalid_input(spec: Path) -> None:
    code, _, err = run("-f", str(spec), "plan", "staging")
    assert code == 2
    assert "no slot named 'staging'" in err


def test_a_file_that_is_not_a_plan_is_refused(spec: Path, tmp_path: Path) -> None:
    junk = tmp_path / "plan.json"
    junk.write_text('{"format": 99}')
    code, _, err = run("-f", str(spec), "deploy", "test1", "--plan", str(junk))
    assert code == 2
    assert "not a shipway plan" in err


def test_help_imports_no_engine_client_libraries() -> None:
    """Nor shipway's own engine, backends or spec: --help (and its exit) needs none."""
    code = (
        "import sys\n"
        "from shipway.cli.main import main\n"
        "sys.argv = ['shipway', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('lightkube', 'docker', 'aiohttp', 'yaml', 'supervisor', 'paramiko')\n"
        "ours = ('shipway.engine', 'shipway.backends', 'shipway.spec', 'shipway.plan')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
        "             or m.startswith(ours)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("pressed", [KeyboardInterrupt, click.exceptions.Abort])
def test_ctrl_c_at_the_confirmation_prompt_exits_130(
    spec: Path, monkeypatch: pytest.MonkeyPatch, pressed: type[BaseException]
) -> None:
    """Ctrl-C while the prompt waits (click turns it into Abort) or while connecting, before
    the engine handles signals itself: 130 and a line, not 1 and "Aborted!"."""

    def ctrl_c(*args: object) -> None:
        raise pressed()

    monkeypatch.setattr(shipway.cli.deploy, "confirmation", ctrl_c)
    code, _, err = run("-f", str(spec), "deploy", "prod")
    assert code == 130
    assert "error: interrupted by SIGINT" in err
