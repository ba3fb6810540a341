"""A Procfile and env files named by the spec instead of repeated in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shipway.errors import SecretUnavailable, SpecInvalid
from shipway.spec import load
from shipway.spec.parse import from_snapshot
from shipway.spec.secrets import resolve_all


def spec(tmp_path: Path, text: str, files: dict[str, str] | None = None) -> Path:
    for name, body in (files or {}).items():
        (tmp_path / name).write_text(body)
    path = tmp_path / "shipway.toml"
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecInvalid) as err:
        load(path)
    return [str(p) for p in err.value.problems]


PROCFILE = """\
# the app's process types
web: gunicorn app:app --bind 0.0.0.0:$PORT
worker:   python3 worker.py --queue "high prio"
release: python3 manage.py migrate && python3 manage.py collectstatic --noinput
"""


def test_a_procfile_gives_the_process_types_commands_and_release_command(
    tmp_path: Path,
) -> None:
    path = spec(
        tmp_path,
        '[app]\nname = "shop"\nprocfile = "Procfile"\n[processes.web]\nport = 8000\n',
        files={"Procfile": PROCFILE},
    )
    app = load(path)
    assert list(app.processes) == ["web", "worker"]
    assert app.processes["web"].command == ("gunicorn", "app:app", "--bind", "0.0.0.0:$PORT")
    assert app.processes["web"].port == 8000  # the table configures what the Procfile names
    assert app.processes["worker"].command == ("python3", "worker.py", "--queue", "high prio")
    # a line only a shell understands runs under sh -c, as a Procfile runner runs it
    assert app.release_command == (
        "sh",
        "-c",
        "python3 manage.py migrate && python3 manage.py collectstatic --noinput",
    )
    # a recorded release holds the commands, not the Procfile's name: it re-reads alone
    again = from_snapshot(json.loads(json.dumps(app.snapshot())), tmp_path / "elsewhere")
    assert again.processes["worker"].command == app.processes["worker"].command


def test_procfile_problems_name_the_procfile_and_its_line(tmp_path: Path) -> None:
    path = spec(
        tmp_path,
        '[app]\nname = "shop"\nprocfile = "Procfile"\nrelease_command = "x"\n'
        '[processes.web]\ncommand = "serve"\n',
        files={
            "Procfile": "web: gunicorn app\nnot a line\ncelery_beat: celery beat\n"
            "web: again\nrelease: migrate\n"
        },
    )
    found = problems(path)
    assert "Procfile:2: app.procfile: is not a 'name: command' line (hint: e.g. web: app)" in found
    assert any(p.startswith("Procfile:3: processes.celery_beat:") for p in found)
    assert any(p.startswith("Procfile:4: processes.web: is declared twice") for p in found)
    assert any("processes.web.command: is also given by Procfile line 1" in p for p in found)
    assert any("app.release_command: is also given by Procfile line 5" in p for p in found)


def test_a_missing_procfile_is_an_error_naming_it(tmp_path: Path) -> None:
    path = spec(tmp_path, '[app]\nname = "shop"\nprocfile = "Procfile"\n')
    (found,) = problems(path)
    assert "app.procfile" in found and "Procfile does not exist" in found


ENV = """\
# local settings
export GREETING=hello from .env
QUOTED="two\\nlines"   # a comment
LITERAL='$NOT_EXPANDED # kept'
DATABASE_URL=postgres://app:s3cr3t-pw@db/app
LOG_LEVEL=debug
"""


def test_env_file_precedence_spec_env_then_env_file_then_slot(tmp_path: Path) -> None:
    path = spec(
        tmp_path,
        '[app]\nname = "shop"\nenv_file = ".env"\n[processes.web]\ncommand = "serve"\n'
        '[env]\nLOG_LEVEL = "info"\nONLY_SPEC = "1"\n'
        '[slots.local]\nenv = { LOG_LEVEL = "warning" }\n[slots.other]\n',
        files={".env": ENV},
    )
    app = load(path)
    assert app.env["ONLY_SPEC"] == "1"
    assert app.env["GREETING"] == "hello from .env"
    assert app.env["QUOTED"] == "two\nlines"
    assert app.env["LITERAL"] == "$NOT_EXPANDED # kept"
    assert app.env["LOG_LEVEL"] == "debug"  # the env file over [env]
    assert app.in_slot("local").env["LOG_LEVEL"] == "warning"  # the slot over both
    assert app.in_slot("other").env["LOG_LEVEL"] == "debug"
    assert app.env_files == (".env",)


def test_a_secret_may_come_from_a_variable_the_env_file_sets(tmp_path: Path) -> None:
    path = spec(
        tmp_path,
        '[app]\nname = "shop"\nenv_file = ".env"\n[processes.web]\ncommand = "serve"\n'
        '[secrets]\nDB = { from_env = "DATABASE_URL" }\n',
        files={".env": ENV},
    )
    app = load(path)
    assert resolve_all(app.secrets, {})["DB"].reveal() == "postgres://app:s3cr3t-pw@db/app"
    # the shell's environment wins over the env file
    assert resolve_all(app.secrets, {"DATABASE_URL": "from-shell"})["DB"].reveal() == "from-shell"
    # the variable a secret reads is not plain env: never in the snapshot a record keeps
    assert "DATABASE_URL" not in app.env
    assert "s3cr3t-pw" not in json.dumps(app.snapshot()) + repr(app)


def test_an_unset_from_env_names_the_env_file_in_its_hint(tmp_path: Path) -> None:
    path = spec(
        tmp_path,
        '[app]\nname = "shop"\nenv_file = ".env"\n[processes.web]\ncommand = "serve"\n'
        '[secrets]\nTOKEN = { from_env = "API_TOKEN" }\n',
        files={".env": "A=1\n"},
    )
    with pytest.raises(SecretUnavailable, match=r"API_TOKEN is not set \(nor in \.env\)"):
        resolve_all(load(path).secrets, {})


def test_a_later_env_file_wins_and_a_bad_line_is_reported_without_its_text(
    tmp_path: Path,
) -> None:
    (tmp_path / ".env.local").write_text("A=local\n")
    path = spec(
        tmp_path,
        '[app]\nname = "shop"\nenv_file = [".env", ".env.local"]\n'
        '[processes.web]\ncommand = "serve"\n',
        files={".env": "A=base\nB=2\n"},
    )
    app = load(path)
    assert (app.env["A"], app.env["B"]) == ("local", "2")
    (tmp_path / ".env").write_text("A=1\nthis-is-sup3r-secret\nB='never closed\n")
    found = problems(path)
    assert any(p.startswith(".env:2: app.env_file: is not a KEY=value line") for p in found)
    assert any(p.startswith(".env:3: app.env_file: B: its quoted value") for p in found)
    assert "sup3r" not in " ".join(found)


def test_an_env_file_variable_that_looks_like_a_credential_is_a_secret_never_plain_env(
    tmp_path: Path,
) -> None:
    # the same rule as init's (spec/envfile.is_credential): by name, or by value
    path = spec(
        tmp_path,
        '[app]\nname = "shop"\nenv_file = ".env"\n[processes.web]\ncommand = "serve"\n'
        '[env]\nSTRIPE_SK = "from-the-spec"\n',
        files={
            ".env": "STRIPE_SK=stripe-sk-1\nMONGODB_URI=mongodb://u:m0ngo-pw@db/x\n"
            "UPSTREAM=https://ann:up-pw@api.example/\nGREETING=hello\n"
        },
    )
    app = load(path)
    assert app.env == {"GREETING": "hello"}
    assert {"STRIPE_SK", "MONGODB_URI", "UPSTREAM"} <= set(app.secrets)
    values = resolve_all(app.secrets, {})
    assert values["MONGODB_URI"].reveal() == "mongodb://u:m0ngo-pw@db/x"
    assert values["STRIPE_SK"].reveal() == "stripe-sk-1"  # the env file's, over [env]
    assert resolve_all(app.secrets, {"UPSTREAM": "shell"})["UPSTREAM"].reveal() == "shell"
    shown = json.dumps(app.snapshot()) + repr(app)
    assert not [v for v in ("stripe-sk-1", "m0ngo-pw", "up-pw") if v in shown]
