"""Real apps on the local backend: the release phase runs first (a SQLite schema made
before the first health check reads it), and snapshots that carry only the app (no secret
file, no ``.env``; every file holding a secret is 0600). The app, ``notes``, is the
conftest's."""

from __future__ import annotations

import stat

from tests.backends.local.conftest import API_TOKEN, DB_PASSWORD, Slot, releases


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
