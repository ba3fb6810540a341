"""examples/django on the real local backend: a Django project from PyPI packages (served
from the test wheelhouse: PIP_FIND_LINKS, no index), its migrations as the release command,
its SQLite database in the slot's volume, gunicorn behind the router.

The module deploys one copy of the example once (one dependency install for the module);
each test then deploys on from whatever release serves, and leaves the copy as it found it.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.local.conftest import Slot, builds, built_slot, env_identity
from tests.testenv.wheelhouse import ensure_wheels

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "django"
HOST = "guestbook.localhost"
BROKEN_MIGRATION = """from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("entries", "0001_initial")]
    operations = [migrations.RunSQL("ALTER TABLE entries_gone ADD COLUMN rating integer")]
"""


# one worker runs the whole module, so its guestbook (module scope) is deployed once
pytestmark = pytest.mark.xdist_group("django_guestbook")


# session, not module: a worker runs this module's tests between others' (slowest first),
# and a module fixture would be deployed again for each of them
@pytest.fixture(scope="session")
def guestbook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slot]:
    """A copy of examples/django, deployed once (r1: its environment built, migrated)."""
    tmp = tmp_path_factory.mktemp("django")
    app_dir = tmp / "guestbook"
    shutil.copytree(EXAMPLE, app_dir, ignore=shutil.ignore_patterns("__pycache__"))
    s = built_slot(app_dir, tmp / "state", ensure_wheels(EXAMPLE / "requirements.txt"))
    try:
        first = s.deploy()
        assert "1. build environment " in first.out, first.text
        assert "release |   Applying entries.0001_initial... OK" in first.out, first.text
        yield s
    finally:
        s.close()


def request(
    slot: Slot, method: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    """One request to ``/`` through the router, as a browser on guestbook.localhost sends it."""
    conn = http.client.HTTPConnection("127.0.0.1", slot.port, timeout=10)
    try:
        conn.request(method, "/", body=body, headers={"Host": HOST, **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


def sign(slot: Slot, text: str) -> None:
    """Add an entry the way the page's form does: its CSRF cookie and token, then POST."""
    status, headers, page = request(slot, "GET")
    assert status == 200, page
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert found and cookie.startswith("csrftoken="), (headers, page)
    form = urllib.parse.urlencode({"csrfmiddlewaretoken": found.group(1), "text": text})
    status, headers, page = request(
        slot,
        "POST",
        form.encode(),
        {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 302 and headers["Location"] == "/", (status, page)


def page(slot: Slot) -> str:
    status, _, body = request(slot, "GET")
    assert status == 200, body
    return body


def served_by(body: str) -> int:
    """The revision of the release that served this page."""
    found = re.search(r"<p>served by r(\d+)</p>", body)
    assert found, body
    return int(found.group(1))


def test_migrated_schema_takes_a_row_through_the_router(guestbook: Slot) -> None:
    # the table exists (the release command made it): a POST adds a row, a GET lists it;
    # both through the router, whose Host (guestbook.localhost) ALLOWED_HOSTS accepts
    sign(guestbook, "signed through the router")
    body = page(guestbook)
    assert "<li>signed through the router</li>" in body
    volume = guestbook.state / "guestbook" / "local" / "volumes" / "data"
    assert (volume / "db.sqlite3").is_file()  # the database is in the volume, not the release
    release = guestbook.state / "guestbook" / "local" / "releases" / f"r{served_by(body)}"
    assert (release / "data").resolve() == volume.resolve()


def test_an_env_change_keeps_the_rows_and_reuses_the_environment(guestbook: Slot) -> None:
    sign(guestbook, "before the env change")
    previous = served_by(page(guestbook))
    before = builds(guestbook)[-1]
    identity = env_identity(before["what"])
    guestbook.edit_spec('GREETING = "guestbook"', 'GREETING = "the new greeting"')
    try:
        r = guestbook.deploy()
    finally:
        guestbook.edit_spec('GREETING = "the new greeting"', 'GREETING = "guestbook"')
    # the build step says the environment was reused: nothing installed, the same directory
    assert f"reuse environment {before['what']}" in r.out, r.out
    assert "build |" not in r.out and "building environment" not in r.out
    after = builds(guestbook)[-1]
    assert after["reused"] and after["what"] == before["what"]
    assert env_identity(after["what"]) == identity
    # the new release serves, and the row of the previous one is still there (the volume);
    # its number is the next one made, which a failed release of another test may have
    # taken (the guestbook is shared by the module's tests)
    rolled = re.search(rf"rolled guestbook/local from r{previous} to r(\d+)", r.out)
    assert rolled is not None and int(rolled[1]) > previous, r.out
    body = page(guestbook)
    assert "<h1>the new greeting</h1>" in body and served_by(body) == int(rolled[1])
    assert "<li>before the env change</li>" in body


def test_a_failing_migration_rolls_back_and_the_previous_release_serves(
    guestbook: Slot,
) -> None:
    sign(guestbook, "before the broken migration")
    previous = served_by(page(guestbook))
    pid = guestbook.processes()["web"]["pid"]
    broken = guestbook.app_dir / "entries" / "migrations" / "0002_broken.py"
    broken.write_text(BROKEN_MIGRATION)
    try:
        r = guestbook.deploy(expect=10)
    finally:
        broken.unlink()
    outcome = next(line for line in r.out.splitlines() if line.startswith("rolled back"))
    assert "ReleaseCommandFailed" in outcome and f"r{previous} is serving again" in outcome
    # Django's own error, from the migration it ran
    assert "release |   Applying entries.0002_broken..." in r.out
    assert "django.db.utils.OperationalError: no such table: entries_gone" in r.out
    assert "] create program/" not in r.out  # nothing of the new release started
    assert [h["status"] for h in guestbook.history()][-1] == "failed"
    # the previous release still serves, from the same process, with its rows
    assert guestbook.processes()["web"]["pid"] == pid
    body = page(guestbook)
    assert served_by(body) == previous and "<li>before the broken migration</li>" in body


STARTPROJECT_SPEC = """\
[app]
name = "mysite"
release_command = "python manage.py migrate --noinput"

[processes.web]
command = "gunicorn --bind 127.0.0.1:$PORT mysite.wsgi"
port = 8000
[processes.web.healthcheck]
path = "/admin/login/"
interval = "200ms"
timeout = "2s"
attempts = 50

[env]
EDITION = "1"
"""
COUNT_USERS = "from django.contrib.auth.models import User; print('users:', User.objects.count())"


def django_lib(wheels: Path, into: Path) -> Path:
    """Django (and what it needs) unpacked from the test wheelhouse: what a developer's
    ``django-admin`` and ``manage.py`` run with on their own machine."""
    for wheel in wheels.glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(into)
    return into


def next_edition(slot: Slot) -> None:
    """A new release of the source (a changed env var)."""
    text = slot.spec.read_text()
    n = int(text.split('EDITION = "')[1].split('"')[0])
    slot.spec.write_text(text.replace(f'EDITION = "{n}"', f'EDITION = "{n + 1}"'))


def users(slot: Slot) -> str:
    r = slot.run("run", "local", "--", "python", "manage.py", "shell", "-c", COUNT_USERS)
    assert r.code == 0, r.text
    return r.out.strip().splitlines()[-1]


def test_startproject_sqlite_is_warned_about_and_the_fix_keeps_the_data(
    tmp_path: Path,
) -> None:
    # a project as `django-admin startproject` makes it, migrated on the developer's
    # machine: its SQLite file db.sqlite3 lies in the app's directory, beside manage.py
    wheels = ensure_wheels(EXAMPLE / "requirements.txt")
    lib = django_lib(wheels, tmp_path / "lib")
    app_dir = tmp_path / "mysite"
    app_dir.mkdir()
    dev = {**os.environ, "PYTHONPATH": str(lib)}
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(app_dir)],
        env=dev, check=True,
    )  # fmt: skip
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"], cwd=app_dir, env=dev, check=True
    )
    assert (app_dir / "db.sqlite3").is_file()
    shutil.copy(EXAMPLE / "requirements.txt", app_dir)
    (app_dir / "shipway.toml").write_text(STARTPROJECT_SPEC)
    s = built_slot(app_dir, tmp_path / "state", wheels)
    try:
        # the plan warns, with the fix that works
        r = s.deploy()
        warning = next(line for line in r.out.splitlines() if "db.sqlite3 in the app" in line)
        assert "warning: db.sqlite3 in the app's directory is a database" in warning
        assert "each deploy replaces the running release's copy" in warning
        assert '[volumes.data] path = "data"' in warning
        fix = 'DATABASES["default"]["NAME"] = BASE_DIR / "data" / "db.sqlite3"'
        assert fix in warning and "move the app's own copy into data/" in warning
        # it is true: a user added to what runs is gone after the next deploy
        s.run("run", "local", "--", "python", "manage.py", "createsuperuser", "--noinput",
              "--username", "ada", "--email", "ada@example.com")  # fmt: skip
        assert users(s) == "users: 1"
        next_edition(s)
        s.deploy()
        assert users(s) == "users: 0"

        # the fix, as the warning says it
        s.edit_spec("[env]", '[volumes.data]\npath = "data"\n\n[env]')
        settings = app_dir / "mysite" / "settings.py"
        text = settings.read_text()
        assert "'NAME': BASE_DIR / 'db.sqlite3'," in text
        settings.write_text(text.replace("BASE_DIR / 'db.sqlite3'", fix.split(" = ")[1]))
        (app_dir / "data").mkdir()
        (app_dir / "db.sqlite3").rename(app_dir / "data" / "db.sqlite3")
        assert s.run("validate").code == 0
        r = s.deploy()
        assert "is a database" not in r.out and "at run time" not in r.out, r.out
        s.run("run", "local", "--", "python", "manage.py", "createsuperuser", "--noinput",
              "--username", "ada", "--email", "ada@example.com")  # fmt: skip
        assert users(s) == "users: 1"
        next_edition(s)
        r = s.deploy()
        assert "rolled mysite/local from r3 to r4" in r.out, r.out
        assert "is a database" not in r.out and "at run time" not in r.out, r.out
        assert users(s) == "users: 1"  # the data survived the redeploy: it is in the volume
        volume = s.state / "mysite" / "local" / "volumes" / "data"
        assert (volume / "db.sqlite3").is_file()
    finally:
        s.close()
