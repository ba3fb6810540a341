"""What a running release wrote inside its own copy of the app, which the next deploy would
lose: read on this backend, and warned about (or, where the backend cannot tell, said)."""

from __future__ import annotations

from pathlib import Path

from tests.backends.local.conftest import (
    API_TOKEN,
    DB_PASSWORD,
    MIGRATE,
    NOTES_APP,
    SPEC,
    Slot,
    releases,
    slot_of,
)


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
