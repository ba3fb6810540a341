"""A Django project from PyPI (``startproject``, built into an image on host A from the
test wheelhouse) with its database in a Postgres accessory, on the two-host Docker slot:
the release command migrates once, on one host, and the app on the other host finds the
tables too; a row written from host B is counted on both hosts; an app redeploy under a
bounded request loop against both hosts fails no request and leaves the accessory's
container running as it was."""

from __future__ import annotations

import http.client
import urllib.parse
from collections.abc import Iterator

import pytest

from shipway import api
from shipway.engine import Rolled
from tests.backends.docker.conftest import SLOT, Deployment, Lines
from tests.backends.docker.test_accessories import a_address, accessory
from tests.backends.docker.test_build import bridge_address
from tests.backends.local.test_django_postgres import ADD_USER, make_project
from tests.loops import RequestLoop
from tests.testenv.docker import DockerHost
from tests.testenv.wheelhouse import Wheelhouse

#: a build (pip from the wheelhouse) and two deploys on two hosts: longer than the default
pytestmark = [pytest.mark.xdist_group("docker_django_postgres"), pytest.mark.timeout(900)]

DOCKERFILE = """\
ARG PYTHON_IMAGE
FROM ${PYTHON_IMAGE}
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ARG PIP_TRUSTED_HOST
WORKDIR /srv/mysite
COPY requirements.txt .
RUN python3 -m venv /venv && /venv/bin/pip install --no-cache-dir -r requirements.txt
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1
COPY . .
"""


@pytest.fixture
def mysite(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Iterator[Wheelhouse]:
    """The project in the deployment's directory, its wheels served to host A's builds."""
    d, env = deployment, deployment.env
    monkeypatch.setenv("SHIPWAY_ACCESSORY_MIRROR", env.image_prefix)
    (d.dir / "project").mkdir()
    app_dir, wheels = make_project(d.dir / "project")
    house = Wheelhouse(wheels)
    house.serve(bridge_address(env))
    d.dir = app_dir
    write(d, house, edition=1)
    yield house
    house.close()


def write(d: Deployment, house: Wheelhouse, edition: int) -> None:
    env = d.env
    (d.dir / "Dockerfile").write_text(DOCKERFILE)
    address = house.url.split("//", 1)[1].split(":", 1)[0]
    d.hosts = [env.a, env.b]
    d.spec_file.write_text(
        f"""
[app]
name = "{d.name}"
image = "{env.image_prefix}/{d.name}"
release_command = "python manage.py migrate --noinput"

[build]
host = "{env.a.url}"
args = {{ PYTHON_IMAGE = "{env.images.python}", PIP_FIND_LINKS = "{house.url}", \
PIP_NO_INDEX = "1", PIP_TRUSTED_HOST = "{address}" }}

[processes.web]
command = "gunicorn --bind 0.0.0.0:$PORT --workers 2 mysite.wsgi"
port = 8000
[processes.web.healthcheck]
path = "/count/"
interval = "200ms"
timeout = "2s"
attempts = 100

[env]
EDITION = "{edition}"
DJANGO_SETTINGS_MODULE = "mysite.settings"

[accessories.db]
kind = "postgres"
version = "15"

[secrets]
DATABASE_URL = {{ from_accessory = "db" }}

[slots.{SLOT}]
backend = "docker"
hosts = [{{ url = "{env.a.url}", address = "{a_address(d)}" }}, "{env.b.url}"]
routes = [{{ host = "{d.name}.localhost", process = "web" }}]
proxy_image = "{env.images.proxy}"
proxy_port = {d.port}
drain_timeout = "2s"
"""
    )


def get(d: Deployment, host: DockerHost, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection(host.address, d.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": f"{d.name}.localhost"})
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def test_django_on_a_postgres_accessory_serves_the_same_rows_from_both_hosts(
    deployment: Deployment, mysite: Wheelhouse
) -> None:
    d, env = deployment, deployment.env
    lines = Lines()
    outcome = api.deploy(d.app(), SLOT, build=True, reporter=lines, timeout=400)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()
    text = lines.text()
    assert "accessory db (postgres 15) answers on" in text
    assert text.count("Applying sessions.0001_initial... OK") == 1, text
    # migrated once, on one host: host B never ran it, and its app finds the tables
    for host in (env.a, env.b):
        assert get(d, host, "/count/") == (200, "users: 0")

    # a row written from host B is in the one database both hosts read
    host_b = urllib.parse.urlsplit(env.b.url).hostname  # its short name in the slot
    code = api.run(d.app(), SLOT, ["python", "manage.py", "shell", "-c", ADD_USER], host=host_b)
    assert code == 0
    for host in (env.a, env.b):
        assert get(d, host, "/count/") == (200, "users: 1")

    before = accessory(d)
    write(d, mysite, edition=2)
    lines = Lines()
    hosts = d.hosts
    with RequestLoop(lambda i: get(d, hosts[i % len(hosts)], "/count/"), limit=5_000) as loop:
        outcome = api.deploy(d.app(), SLOT, build=True, reporter=lines, timeout=400)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()
    assert loop.done > 20 and loop.failed() == [], (loop.done, loop.failed()[:5])
    print(f"redeploy under a request loop: {loop.done} requests, {len(loop.failed())} failed")
    after = accessory(d)
    assert (after.id, after.attrs["State"]["StartedAt"]) == (
        before.id,
        before.attrs["State"]["StartedAt"],
    )
    for host in (env.a, env.b):
        assert get(d, host, "/count/") == (200, "users: 1")
