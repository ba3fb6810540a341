"""examples/django on the real local backend: a Django project from PyPI packages (served
from the test wheelhouse: PIP_FIND_LINKS, no index), its migrations as the release command,
its SQLite database in the slot's volume, gunicorn behind the router.

The module deploys one copy of the example once (one dependency install for the module);
each test then deploys on from whatever release serves, and leaves the copy as it found it.
"""

from __future__ import annotations

import http.client
import re
import shutil
import urllib.parse
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


@pytest.fixture(scope="module")
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
    # the new release serves, and the row of the previous one is still there (the volume)
    assert f"rolled guestbook/local from r{previous} to r{previous + 1}" in r.out
    body = page(guestbook)
    assert "<h1>the new greeting</h1>" in body and served_by(body) == previous + 1
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
