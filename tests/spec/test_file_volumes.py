"""A volume is a directory on every backend: a path the app holds as a file, or one named
like a database file, is refused by ``validate`` (exit 2) with a fix that works — a
directory volume, and the app pointed at the file inside it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import cliproc

SPEC = """
[app]
name = "site"

[processes.web]
command = "gunicorn site.wsgi"
port = 8000

[volumes.data]
path = "{path}"

[slots.local]
backend = "local"
"""


def validate(app: Path, path: str) -> subprocess.CompletedProcess[str]:
    (app / "shipway.toml").write_text(SPEC.format(path=path))
    return cliproc.run(
        [sys.executable, "-m", "shipway", "-f", str(app / "shipway.toml"), "validate"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_the_sqlite_file_of_a_django_project_is_refused_as_a_volume(tmp_path: Path) -> None:
    (tmp_path / "db.sqlite3").write_bytes(b"SQLite format 3\0")
    r = validate(tmp_path, "db.sqlite3")
    assert r.returncode == 2, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "volumes.data.path: 'db.sqlite3' is a file in the app's directory" in out
    assert "a volume is a directory on every backend" in out
    assert '[volumes.data] path = "data"' in out
    assert 'DATABASES["default"]["NAME"] = BASE_DIR / "data" / "db.sqlite3"' in out


def test_a_database_name_is_refused_even_before_the_file_exists(tmp_path: Path) -> None:
    r = validate(tmp_path, "instance/notes.db")  # made by the release command, later
    assert r.returncode == 2, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "'instance/notes.db' names a database file" in out
    assert '[volumes.data] path = "instance"' in out and "instance/notes.db" in out


def test_any_file_of_the_app_is_refused_and_a_directory_is_not(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{}")
    r = validate(tmp_path, "state.json")
    assert r.returncode == 2 and "'state.json' is a file in the app's directory" in r.stderr
    (tmp_path / "data").mkdir()
    r = validate(tmp_path, "data")
    assert r.returncode == 0, r.stdout + r.stderr
