"""The local backend builds what a release runs: the example Flask app (examples/notes)
gets its own virtualenv with Flask and gunicorn from PyPI packages (served from the test
wheelhouse: PIP_FIND_LINKS, no index), and its processes and release command run with it
whatever the deploying shell has on PATH or activated."""

from __future__ import annotations

import http.client
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.local.conftest import (
    BARE_PATH,
    Slot,
    builds,
    built_slot,
    env_identity,
    eventually,
    web_environ,
)
from tests.testenv.wheelhouse import Wheelhouse

REPO = Path(__file__).resolve().parents[3]
NOTES = REPO / "examples" / "notes"
HOST = "notes.localhost"


@pytest.fixture
def notes(tmp_path: Path, wheelhouse: Wheelhouse) -> Iterator[Slot]:
    """examples/notes, deployed from a shell whose PATH holds no app dependency, and where
    a *wrong* virtualenv is activated (its gunicorn only fails)."""
    app_dir = tmp_path / "notes"
    shutil.copytree(NOTES, app_dir)
    # the release command imports Flask: it too must run with the release's environment
    (app_dir / "migrate.py").write_text("import flask\nimport store\n\nstore.migrate()\n"
                                        "print('schema ready, flask', flask.__name__)\n")
    wrong = tmp_path / "activated-venv"
    (wrong / "bin").mkdir(parents=True)
    (wrong / "bin" / "gunicorn").write_text("#!/bin/sh\necho 'the wrong gunicorn' >&2\nexit 9\n")
    (wrong / "bin" / "gunicorn").chmod(0o755)
    s = built_slot(
        app_dir,
        tmp_path / "state",
        wheelhouse.dir,
        PATH=f"{wrong / 'bin'}:{BARE_PATH}",
        VIRTUAL_ENV=str(wrong),
    )
    try:
        yield s
    finally:
        s.close()


def test_a_flask_app_runs_with_its_own_environment(notes: Slot) -> None:
    assert shutil.which("gunicorn", path=BARE_PATH) is None  # nothing on PATH has it
    r = notes.deploy()
    assert "1. build environment " in r.out and "from requirements.txt (pip)" in r.out
    assert "release | schema ready, flask flask" in r.out
    status, body = notes.get("/", host=HOST)
    assert status == 200 and "served by r1" in body
    (build,) = builds(notes)
    assert build["kind"] == "environment" and not build["reused"]
    env_dir = Path(build["what"])
    assert (env_dir / "bin" / "gunicorn").is_file() and env_dir.parent.name == "envs"
    environ = web_environ(notes)
    assert environ["VIRTUAL_ENV"] == str(env_dir)  # not the activated one
    assert environ["PATH"].split(":")[0] == str(env_dir / "bin")


def test_unchanged_requirements_reuse_the_environment(notes: Slot) -> None:
    notes.deploy()
    first = builds(notes)[0]
    before = env_identity(first["what"])
    (notes.app_dir / "app.py").write_text(
        (notes.app_dir / "app.py").read_text() + "\n# a code change, no dependency change\n"
    )
    plan = notes.run("plan", "local")
    assert f"1. reuse environment {first['what']}" in plan.out, plan.text
    r = notes.deploy()
    assert "build |" not in r.out
    second = builds(notes)[1]
    assert second["reused"] and second["what"] == first["what"]
    assert second["result"] == first["result"] and second["inputs"] == first["inputs"]
    assert env_identity(second["what"]) == before  # the same directory, untouched
    assert web_environ(notes)["VIRTUAL_ENV"] == first["what"]


class Loop(threading.Thread):
    """GET / through the router until stopped (bounded: at most 20 000 requests)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.stop, self.ok, self.failures = port, threading.Event(), 0, []

    def run(self) -> None:
        for _ in range(20_000):
            if self.stop.is_set():
                return
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                conn.request("GET", "/up", headers={"Host": HOST})
                response = conn.getresponse()
                response.read()
                if response.status == 200:
                    self.ok += 1
                else:
                    self.failures.append(str(response.status))
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            finally:
                conn.close()


def test_a_changed_requirement_builds_a_new_environment_while_the_old_serves(
    notes: Slot,
) -> None:
    notes.edit_spec('backend = "local"', 'backend = "local"\nhistory_limit = 1')
    notes.deploy()
    old = builds(notes)[0]["what"]
    requirements = notes.app_dir / "requirements.txt"
    requirements.write_text(requirements.read_text() + "blinker==1.9.*\n")
    loop = Loop(notes.port)
    loop.start()
    try:
        eventually(lambda: loop.ok > 5, what="requests served before the deploy")
        r = notes.deploy()
        eventually(lambda: loop.ok > 20, what="requests served after it")
    finally:
        loop.stop.set()
        loop.join(timeout=30)
    assert loop.failures == [], loop.failures[:5]
    (new,) = builds(notes)  # history_limit = 1: r1's record went once r2 was deployed
    assert not new["reused"] and new["what"] != old
    assert "building environment" in r.out
    assert Path(old).is_dir()  # it was live while r2's was built: kept
    assert web_environ(notes)["VIRTUAL_ENV"] == new["what"]
    assert "served by r2" in notes.get("/", host=HOST)[1]
    # pruned with its release, at the next build: no record and no program names it now
    requirements.write_text(requirements.read_text() + "itsdangerous==2.2.*\n")
    r = notes.deploy()
    assert "pruned environments no release names: " + Path(old).name in r.out
    assert not Path(old).exists() and Path(new["what"]).is_dir()


def test_an_uninstallable_requirement_rolls_back_with_pips_error(notes: Slot) -> None:
    notes.deploy()
    requirements = notes.app_dir / "requirements.txt"
    requirements.write_text(requirements.read_text() + "shipway-test-no-such-package==9.9\n")
    r = notes.deploy(expect=10)
    first_line = next(line for line in r.out.splitlines() if line.startswith("rolled back"))
    assert "BuildFailed" in first_line and "pip install failed" in first_line
    assert "No matching distribution found for shipway-test-no-such-package==9.9" in first_line
    assert "r1 is serving again" in first_line
    assert [h["status"] for h in notes.history()] == ["deployed", "failed"]
    assert "served by r1" in notes.get("/", host=HOST)[1]
    envs = sorted(p.name for p in Path(builds(notes)[0]["what"]).parent.iterdir() if p.is_dir())
    assert envs == [Path(builds(notes)[0]["what"]).name]  # the half-made one is gone


def test_build_false_builds_nothing_and_a_custom_command_builds_into_shipway_env(
    notes: Slot,
) -> None:
    spec = notes.spec.read_text()
    # build = false: requirements.txt is there, and nothing is built (a stdlib web)
    notes.spec.write_text(
        spec.replace('release_command = "python3 migrate.py"', "build = false")
        .replace('command = "gunicorn app:app"', 'command = "python3 -m http.server $PORT"')
        .replace('path = "/up"', 'path = "/"')
    )
    plan = notes.run("plan", "local")
    steps = [line for line in plan.out.splitlines() if line.startswith("  1. ")]
    assert plan.code == 0 and steps == ["  1. create snapshot"], plan.text
    notes.deploy()
    assert builds(notes) == [None]
    assert "VIRTUAL_ENV" not in web_environ(notes)  # nor the shell's: it is not inherited
    # a custom build: its command fills $SHIPWAY_ENV; its bin/ is first on PATH
    (notes.app_dir / "build.sh").write_text(
        'mkdir -p "$SHIPWAY_ENV/bin"\n'
        'printf \'#!/bin/sh\\necho "made by the build: $1"\\n\' > "$SHIPWAY_ENV/bin/made"\n'
        'chmod +x "$SHIPWAY_ENV/bin/made"\necho custom build done\n'
    )
    notes.spec.write_text(
        notes.spec.read_text().replace(
            "build = false", 'build = "sh build.sh"\nrelease_command = "made release-phase"'
        )
    )
    r = notes.deploy()
    assert "from the build command: sh build.sh" in r.out
    assert "build | custom build done" in r.out
    assert "release | made by the build: release-phase" in r.out
    second = builds(notes)[1]
    assert second["what"].rsplit("/", 1)[1].startswith("cmd-")
    assert web_environ(notes)["PATH"].split(":")[0] == f"{second['what']}/bin"
    # its inputs are the whole source: any change builds anew
    (notes.app_dir / "store.py").write_text((notes.app_dir / "store.py").read_text() + "#\n")
    notes.deploy()
    assert builds(notes)[2]["what"] != second["what"]


def test_promote_builds_the_environment_of_the_tested_snapshot(notes: Slot) -> None:
    notes.edit_spec('[slots.local]\nbackend = "local"\n',
                    '[slots.local]\nbackend = "local"\npromotes_to = "stage"\n\n'
                    '[slots.stage]\nbackend = "local"\n')  # fmt: skip
    notes.deploy()
    tested = builds(notes)[0]
    # the source moves on (gunicorn dropped); stage gets what local ran, gunicorn included
    (notes.app_dir / "requirements.txt").write_text("flask==3.1.*\n")
    r = notes.run("promote", "local")
    assert r.code == 0, r.text
    staged = notes.json("history", "stage")["releases"][0]["build"]
    assert staged["inputs"] == tested["inputs"] and "/stage/envs/" in staged["what"]
    status, body = notes.get("/", host="stage.notes.localhost")
    assert status == 200 and "served by r1" in body


PYPROJECT = """\
[project]
name = "shop"
version = "{version}"
dependencies = [{deps}]
"""


def test_a_pyproject_version_bump_builds_nothing_new_and_a_dependency_change_does(
    tmp_path: Path,
) -> None:
    from shipway.backends.local.dependencies import recipe_of
    from shipway.spec.load import load

    (tmp_path / "shipway.toml").write_text(
        '[app]\nname = "shop"\n[processes.web]\ncommand = "python3 app.py"\nport = 8000\n'
    )
    app = load(str(tmp_path / "shipway.toml"))

    def env_id(version: str, deps: str) -> str:
        (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(version=version, deps=deps))
        recipe = recipe_of(app, tmp_path)
        assert recipe is not None
        return recipe.id(tmp_path)

    first = env_id("1.0.0", '"flask>=3"')
    assert env_id("1.0.1", '"flask>=3"') == first
    assert env_id("1.0.1", '"flask>=3", "gunicorn"') != first
