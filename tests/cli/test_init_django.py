"""``shipway init`` on a project ``django-admin startproject`` made (Django from PyPI, served
from the test wheelhouse): the spec it writes runs the migrations as the release command and
declares a directory volume for the SQLite database, and says the one settings change that
puts the database there. Deployed on the local backend as written, a page that reads the
auth tables answers; after the change init names, the database is in the volume."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.local.conftest import Slot, built_slot, eventually
from tests.testenv.wheelhouse import ensure_wheels

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "examples" / "django" / "requirements.txt"
USERS_VIEW = """
from django.contrib.auth.models import User
from django.http import HttpResponse


def users(request):
    return HttpResponse(f"users: {User.objects.count()}")


urlpatterns += [path("", users)]  # the health check's path too
"""


@pytest.fixture
def startproject(tmp_path: Path) -> Iterator[tuple[Path, Slot]]:
    """A new Django project (``startproject mysite``, a page that counts the users) and a
    local slot whose builds install from the wheelhouse only."""
    wheels = ensure_wheels(REQUIREMENTS)
    lib = tmp_path / "django-lib"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links",
         str(wheels), "--target", str(lib), "django"],
        check=True,
    )  # fmt: skip
    app = tmp_path / "polls"
    app.mkdir()
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(app)],
        check=True,
        env={"PYTHONPATH": str(lib), "PATH": "/usr/bin:/bin"},
    )
    shutil.copy(REQUIREMENTS, app / "requirements.txt")
    urls = app / "mysite" / "urls.py"
    urls.write_text(urls.read_text() + USERS_VIEW)
    slot = built_slot(app, tmp_path / "state", wheels)
    try:
        yield app, slot
    finally:
        slot.close()


def users_page(slot: Slot) -> str:
    def answer() -> str | None:
        code, body = slot.get("/", host="polls.localhost")
        return body if code == 200 else None

    return eventually(answer, what="/ answering 200")


def test_init_on_a_django_startproject_migrates_and_keeps_the_database_in_a_volume(
    startproject: tuple[Path, Slot],
) -> None:
    app, slot = startproject
    r = slot.run("init")
    assert r.code == 0, r.text
    spec = slot.spec.read_text()
    assert 'release_command = "python3 manage.py migrate --noinput"' in spec, spec
    assert "[volumes.data]" in spec and 'path = "data"' in spec, spec
    # startproject's settings say BASE_DIR / 'db.sqlite3': init says exactly what to change
    change = (
        "in mysite/settings.py, change BASE_DIR / 'db.sqlite3' to BASE_DIR / 'data' / 'db.sqlite3'"
    )
    assert f"to do: {change}" in r.out, r.out
    assert "# change: in mysite/settings.py, change BASE_DIR / 'db.sqlite3' to" in spec
    assert "STATIC_ROOT" in r.out  # no static setup: said, not silently left out

    deployed = slot.run("deploy")
    assert deployed.code == 0, deployed.text
    assert "Applying auth.0001_initial... OK" in deployed.out, deployed.text
    assert users_page(slot) == "users: 0"  # not "no such table: auth_user"

    # the change init named: the database moves into the volume, which outlives releases
    settings = app / "mysite" / "settings.py"
    settings.write_text(
        settings.read_text().replace("BASE_DIR / 'db.sqlite3'", "BASE_DIR / 'data' / 'db.sqlite3'")
    )
    again = slot.run("deploy")
    assert again.code == 0, again.text
    assert users_page(slot) == "users: 0"
    volume = slot.state / "polls" / "local" / "volumes" / "data"
    assert (volume / "db.sqlite3").is_file()
    created = slot.run(
        "run", "local", "--", "python3", "manage.py", "shell", "-c",
        "from django.contrib.auth.models import User; User.objects.create(username='ann')",
    )  # fmt: skip
    assert created.code == 0, created.text
    assert users_page(slot) == "users: 1"
    slot.edit_spec("[volumes.data]", '[env]\nNEXT = "1"\n\n[volumes.data]')
    fourth = slot.run("deploy")
    assert fourth.code == 0, fourth.text
    assert users_page(slot) == "users: 1"  # the row outlives the release
