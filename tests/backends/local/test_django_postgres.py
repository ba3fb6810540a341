"""A Django project from PyPI (``startproject``) with its database in a Postgres accessory,
on the real local backend: the release command migrates the accessory's database; rows
written survive an app redeploy and a rollback; a redeploy fails no request of a bounded
loop; the server is never restarted by any of it."""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shipway.backends.local.servers import pg_bin
from tests.backends.local.conftest import Slot, built_slot
from tests.backends.local.test_accessories import password, server_pid
from tests.backends.local.test_django import django_lib, next_edition
from tests.loops import RequestLoop
from tests.testenv.wheelhouse import ensure_wheels

pytestmark = [
    pytest.mark.skipif(
        not (pg_bin("15") / "postgres").is_file(), reason="postgresql-15 is not installed"
    ),
    pytest.mark.xdist_group("django_postgres"),
]

REQUIREMENTS = "django==5.2.*\ngunicorn==23.*\npsycopg[binary]==3.*\n"
HOST = "mysite.localhost"

SPEC = """\
[app]
name = "mysite"
release_command = "python manage.py migrate --noinput"

[processes.web]
command = "gunicorn --bind 127.0.0.1:$PORT --workers 2 mysite.wsgi"
port = 8000
[processes.web.healthcheck]
path = "/count/"
interval = "200ms"
timeout = "2s"
attempts = 100

[env]
EDITION = "1"
DJANGO_SETTINGS_MODULE = "mysite.settings"

[accessories.db]
kind = "postgres"
version = "15"

[secrets]
DATABASE_URL = { from_accessory = "db" }
"""

#: what the project's settings.py gets: its database from DATABASE_URL, its hosts
SETTINGS = """
import os
import urllib.parse as _url

_db = _url.urlsplit(os.environ["DATABASE_URL"])
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.path.lstrip("/"),
        "USER": _url.unquote(_db.username or ""),
        "PASSWORD": _url.unquote(_db.password or ""),
        "HOST": _db.hostname,
        "PORT": _db.port,
    }
}
ALLOWED_HOSTS = [".localhost", "127.0.0.1"]
"""

URLS = """
from django.contrib.auth.models import User
from django.http import HttpResponse

urlpatterns.append(path("count/", lambda request: HttpResponse(f"users: {User.objects.count()}")))
"""

ADD_USER = "from django.contrib.auth.models import User; User.objects.create_user('ada')"


def make_project(tmp: Path) -> tuple[Path, Path]:
    requirements = tmp / "requirements.txt"
    requirements.write_text(REQUIREMENTS)
    wheels = ensure_wheels(requirements)
    lib = django_lib(wheels, tmp / "lib")
    app_dir = tmp / "mysite"
    app_dir.mkdir()
    dev = {**os.environ, "PYTHONPATH": str(lib)}
    subprocess.run(
        [sys.executable, "-m", "django", "startproject", "mysite", str(app_dir)],
        env=dev, check=True,
    )  # fmt: skip
    settings = app_dir / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + SETTINGS)
    urls = app_dir / "mysite" / "urls.py"
    urls.write_text(urls.read_text() + URLS)
    shutil.copy(requirements, app_dir)
    (app_dir / "shipway.toml").write_text(SPEC)
    return app_dir, wheels


def get(slot: Slot, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", slot.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": HOST})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def users(slot: Slot) -> str:
    status, body = get(slot, "/count/")
    assert status == 200, body
    return body


def test_django_on_postgres_keeps_its_rows_and_fails_no_request_on_redeploy(
    tmp_path: Path,
) -> None:
    app_dir, wheels = make_project(tmp_path)
    s = built_slot(app_dir, tmp_path / "state", wheels)
    try:
        r = s.deploy()
        assert "create accessory db (postgres 15)" in r.out, r.text
        assert "Applying auth.0001_initial... OK" in r.out, r.text
        pid = server_pid(s, "db", "mysite")
        secret = password(s, "db", "mysite")
        r = s.run("run", "local", "--", "python", "manage.py", "shell", "-c", ADD_USER)
        assert r.code == 0, r.text
        assert users(s) == "users: 1"

        next_edition(s)
        with RequestLoop(lambda _: get(s, "/count/")) as loop:
            r = s.deploy()
        assert "rolled mysite/local from r1 to r2" in r.out, r.text
        assert loop.done > 20 and loop.failed() == [], (loop.done, loop.failed()[:5])
        assert "accessory" not in r.out.split("(made from")[0]
        assert users(s) == "users: 1"
        assert server_pid(s, "db", "mysite") == pid

        r = s.run("rollback", "local", "1")
        assert r.code == 0, r.text
        assert users(s) == "users: 1"
        assert server_pid(s, "db", "mysite") == pid
        for out in (r.text, s.run("status", "local", "-o", "json").text):
            assert secret not in out
    finally:
        s.close()
