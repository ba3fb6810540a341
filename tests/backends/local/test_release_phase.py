"""Real apps on the local backend: the release phase runs first (a SQLite schema made
before the first health check reads it), one-off commands (``shipway run``, through a
pseudo-terminal too), what a release wrote inside its snapshot, and snapshots that carry
only the app (no secret file, no ``.env``; every file holding a secret is 0600)."""

from __future__ import annotations

import os
import pty
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.local.conftest import Slot, slot_of
from tests.terminal import read_until

NOTES_APP = '''\
"""notes: a tiny app whose health check reads its SQLite database."""
import http.server
import os
import sqlite3

DB = os.environ.get("NOTES_DB", "notes.db")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        try:
            with sqlite3.connect(DB) as db:
                count = db.execute("SELECT count(*) FROM notes").fetchone()[0]
            code, body = 200, f"notes: {count}\\n"
        except sqlite3.Error as exc:
            code, body = 500, f"database not ready: {exc}\\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''

MIGRATE = '''\
import os
import sqlite3
import sys

if os.environ.get("MIGRATE_FAIL"):
    print("migration refused: MIGRATE_FAIL is set")
    sys.exit(4)
with sqlite3.connect(os.environ.get("NOTES_DB", "notes.db")) as db:
    db.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT)")
    db.execute("INSERT INTO notes (text) VALUES ('first')")
print("migrated", os.environ["SHIPWAY_RELEASE"])
'''

SPEC = """\
[app]
name = "notes"
release_command = "python3 migrate.py"

[processes.web]
command = "python3 app.py"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 50

[env]
GREETING = "hi"

[secrets]
DB_PASSWORD = { from_file = "secrets/db-password" }
API_TOKEN = { from_env = "NOTES_API_TOKEN" }

[files]
"config/db.ini" = "password=${secrets.DB_PASSWORD}\\n"
"config/plain.ini" = "colour=blue\\n"

[slots.local]

[slots.prod]
role = "production"
"""

DB_PASSWORD = "pw-5d41402abc4b2a76"
API_TOKEN = "tok-7e240de74fb1ed08"


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[Slot]:
    app_dir = tmp_path / "notes"
    files = {
        "app.py": NOTES_APP,
        "migrate.py": MIGRATE,
        "shipway.toml": SPEC,
        "secrets/db-password": DB_PASSWORD + "\n",
        ".env": f"API_TOKEN={API_TOKEN}\n",
        ".env.example": "API_TOKEN=\n",
        ".git/HEAD": "ref: refs/heads/main\n",
        "venv/pyvenv.cfg": "home = /usr/bin\n",
        "node_modules/left-pad/index.js": "module.exports = 1\n",
        "drafts/todo.txt": "not for production\n",
        ".shipwayignore": "drafts/\n",
    }
    for rel, text in files.items():
        (app_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (app_dir / rel).write_text(text)
    s = slot_of(app_dir, tmp_path / "state", NOTES_API_TOKEN=API_TOKEN)
    try:
        yield s
    finally:
        s.supervisor().shutdown()


def releases(slot: Slot, name: str = "local") -> Path:
    return slot.state / "notes" / name / "releases"


def test_the_release_command_makes_the_schema_before_the_first_health_check(
    notes: Slot,
) -> None:
    r = notes.deploy()
    # the release phase ran before any program of the release started, and the health
    # check (which reads the database) passed on the first deploy
    assert r.out.index("] run the release command") < r.out.index("] create program/web@")
    assert "release | migrated r1" in r.out
    assert notes.get("/", host="notes.localhost") == (200, "notes: 1\n")


def test_a_failing_release_command_starts_nothing_new(notes: Slot) -> None:
    notes.deploy()
    before = notes.programs()
    pids = {p: row["pid"] for p, row in notes.processes().items()}
    notes.edit_spec('GREETING = "hi"', 'GREETING = "hi"\nMIGRATE_FAIL = "1"')
    r = notes.deploy(expect=10)
    assert "ReleaseCommandFailed" in r.out and "exited with code 4" in r.out
    assert "release | migration refused: MIGRATE_FAIL is set" in r.out
    assert "] create program/" not in r.out  # no program of r2 was ever created
    assert notes.programs() == before  # supervisord runs exactly what it ran
    assert {p: row["pid"] for p, row in notes.processes().items()} == pids
    assert notes.get("/", host="notes.localhost") == (200, "notes: 1\n")
    assert [(h["revision"], h["status"]) for h in notes.history()] == [
        (1, "deployed"),
        (2, "failed"),
    ]


def test_a_first_deploy_whose_release_command_fails_starts_nothing(notes: Slot) -> None:
    notes.edit_spec('GREETING = "hi"', 'GREETING = "hi"\nMIGRATE_FAIL = "1"')
    r = notes.deploy(expect=12)
    assert "ReleaseCommandFailed" in r.out
    assert notes.programs() == []
    assert "] create program/" not in r.out


def test_a_new_generation_runs_its_release_command_before_any_of_its_programs(
    notes: Slot,
) -> None:
    notes.edit_spec("[slots.local]", '[slots.local]\nstrategy = "blue-green"\nsleep_after = 0')
    r = notes.deploy()
    walked = [line for line in r.out.splitlines() if line.startswith("[")]
    command = next(i for i, line in enumerate(walked) if "run the release command" in line)
    assert command < next(i for i, line in enumerate(walked) if "/program/web@" in line)
    assert notes.get("/", host="notes.localhost") == (200, "notes: 1\n")
    before = notes.programs()
    notes.edit_spec('GREETING = "hi"', 'GREETING = "hi"\nMIGRATE_FAIL = "1"')
    r = notes.deploy(expect=10)
    assert "ReleaseCommandFailed" in r.out
    walked = [line for line in r.out.splitlines() if line.startswith("[")]
    assert not any("/program/" in line for line in walked), walked  # none of its programs
    assert notes.programs() == before
    assert notes.get("/", host="notes.localhost") == (200, "notes: 1\n")


def test_run_prints_the_release_env_and_returns_the_commands_exit_code(notes: Slot) -> None:
    notes.deploy()
    show = "import os; print(os.environ['GREETING'], os.environ['SHIPWAY_RELEASE'], os.getcwd())"
    r = notes.run("run", "local", "--", "python3", "-c", show)
    assert r.code == 0, r.text
    greeting, release, cwd = r.out.split()
    assert (greeting, release) == ("hi", "r1")
    assert Path(cwd) == releases(notes) / "r1"  # in the release's own snapshot
    # a secret is the command's to print: its output is the user's; shipway's lines mask
    r = notes.run("run", "local", "--", "sh", "-c", f"echo $API_TOKEN; exit 7 # {API_TOKEN}")
    assert r.code == 7, r.text
    assert r.out == f"{API_TOKEN}\n"
    assert API_TOKEN not in r.err and "running sh -c" in r.err
    r = notes.run("run", "local", "--", "no-such-command")
    assert r.code == 127 and "no-such-command: command not found" in r.err


def test_run_is_refused_on_a_guarded_slot_without_confirm(notes: Slot) -> None:
    r = notes.run("deploy", "prod", "--confirm", "prod")
    assert r.code == 0, r.text
    touch = ["python3", "-c", "open('ran', 'w').write('yes')"]
    r = notes.run("run", "prod", "--", *touch)
    assert r.code == 3, r.text
    assert "production" in r.err and "--confirm prod" in r.err
    assert not (releases(notes, "prod") / "r1" / "ran").exists()  # nothing ran
    r = notes.run("run", "prod", "--confirm", "prod", "--", *touch)
    assert r.code == 0, r.text
    assert (releases(notes, "prod") / "r1" / "ran").read_text() == "yes"


def test_run_is_interactive_through_a_pseudo_terminal(notes: Slot) -> None:
    notes.deploy()
    code = "import sys; name = input('name? '); print('hello', name, sys.stdin.isatty())"
    main, sub = pty.openpty()
    p = subprocess.Popen(
        notes.argv("run", "local", "--", "python3", "-c", code),
        env=notes.env,
        cwd=notes.app_dir,
        stdin=sub,
        stdout=sub,
        stderr=sub,
        start_new_session=True,
    )
    os.close(sub)
    seen = b""
    try:
        seen = read_until(main, b"name? ", seen)
        os.write(main, b"Ada\n")
        seen = read_until(main, b"hello Ada True", seen)
        assert p.wait(timeout=30) == 0, seen.decode(errors="replace")
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
        os.close(main)


def test_a_file_written_inside_the_release_snapshot_is_warned_about(notes: Slot) -> None:
    notes.deploy()
    r1 = releases(notes) / "r1"
    assert (r1 / "notes.db").is_file()  # the release command made it in r1's snapshot
    r = notes.run("run", "local", "--", "sh", "-c", "mkdir -p media && echo x > media/a.png")
    assert r.code == 0, r.text
    with (notes.app_dir / "app.py").open("a") as f:
        f.write("# r2\n")  # a new release of the source (the same one would be "no changes")
    r = notes.deploy()
    warning = next(line for line in r.out.splitlines() if "at run time" in line)
    assert "r1 wrote 2 file(s) at run time inside its own copy of the app" in warning
    assert "media/a.png, notes.db (notes.db: a database)" in warning
    # the fix that works: a volume is a directory, the database goes inside it
    assert 'declare a directory volume, [volumes.data] path = "data"' in warning
    assert "point the app at data/notes.db" in warning
    # what r1 shipped is not named; r2 starts from the source, without them
    assert "app.py" not in warning and "config/" not in warning
    assert not (releases(notes) / "r2" / "media").exists()


def test_build_output_of_the_release_command_and_ignored_files_are_not_data(
    notes: Slot,
) -> None:
    # the release command also collects static files into the release (collectstatic)
    notes.edit_spec(
        'release_command = "python3 migrate.py"',
        "release_command = \"sh -c 'python3 migrate.py && mkdir -p staticfiles && "
        "echo body > staticfiles/app.css'\"",
    )
    notes.deploy()
    assert (releases(notes) / "r1" / "staticfiles" / "app.css").is_file()
    r = notes.run("run", "local", "--", "sh", "-c", "mkdir -p tmp && echo x > tmp/cache.bin")
    assert r.code == 0, r.text
    with (notes.app_dir / ".shipwayignore").open("a") as f:
        f.write("tmp/\n")  # the team says tmp/ is not the app's: no data to warn about
    # the plan says it, before anything is touched; the deploy says it once it rolled
    plan = notes.run("plan", "local")
    assert plan.code == 0, plan.text
    r = notes.deploy()
    for out in (plan.out, r.out):
        warning = next(line for line in out.splitlines() if "at run time" in line)
        # the database its migrations made holds data: named; the build output and what
        # .shipwayignore names are not
        assert "r1 wrote 1 file(s) at run time" in warning, warning
        assert ": notes.db (notes.db: a database)" in warning
        assert "staticfiles" not in warning and "tmp/cache.bin" not in warning


def test_a_state_dir_inside_the_app_holds_no_database_of_the_app(tmp_path: Path) -> None:
    # the state directory lies inside the app: the databases its releases made there are
    # not the app's (a snapshot never copies the state dir), so the plan names none
    app_dir = tmp_path / "notes"
    files = {
        "app.py": NOTES_APP,
        "migrate.py": MIGRATE,
        "shipway.toml": SPEC,
        "secrets/db-password": DB_PASSWORD + "\n",
    }
    for rel, text in files.items():
        (app_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (app_dir / rel).write_text(text)
    s = slot_of(app_dir, app_dir / ".state", NOTES_API_TOKEN=API_TOKEN)
    try:
        s.deploy()
        assert (app_dir / ".state" / "notes" / "local" / "releases" / "r1" / "notes.db").is_file()
        with (app_dir / "app.py").open("a") as f:
            f.write("# r2\n")
        r = s.run("plan", "local")
        assert r.code == 0, r.text
        assert "in the app's directory is a database" not in r.out, r.out
    finally:
        s.supervisor().shutdown()


def test_snapshots_carry_only_the_app_and_secrets_are_0600(notes: Slot) -> None:
    notes.deploy()
    snap = releases(notes) / "r1"
    kept = sorted(str(p.relative_to(snap)) for p in snap.rglob("*"))
    for gone in (".env", "secrets/db-password", ".git", "venv", "node_modules", "drafts"):
        assert gone not in kept, kept
    assert ".env.example" in kept and "app.py" in kept
    # the config file that holds a secret is 0600, the plain one is not secret
    assert stat.S_IMODE((snap / "config" / "db.ini").stat().st_mode) == 0o600
    assert (snap / "config" / "db.ini").read_text() == f"password={DB_PASSWORD}\n"
    assert stat.S_IMODE((snap / "config" / "plain.ini").stat().st_mode) == 0o644
    r = notes.run("run", "local", "--", "sh", "-c", "echo $DB_PASSWORD $API_TOKEN")
    assert r.out.split() == [DB_PASSWORD, API_TOKEN]
    # every file shipway wrote that holds a secret value is readable by its owner only
    holding = []
    for path in notes.state.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if DB_PASSWORD.encode() in data or API_TOKEN.encode() in data:
                holding.append(path)
                mode = stat.S_IMODE(path.stat().st_mode)
                assert mode & 0o077 == 0, f"{path} holds a secret and is {oct(mode)}"
    assert holding, "the env files and the secret-bearing config file hold the secrets"

