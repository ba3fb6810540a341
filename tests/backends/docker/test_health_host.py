"""The health check sends the route's declared host name as ``Host``: a Django project
(examples/django, built on host A from the test wheelhouse) whose ``ALLOWED_HOSTS`` holds
only its route's name passes its gate and is served by that name; any other ``Host`` still
gets Django's 400 (the check did not get in by a laxer setting)."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from shipway import api
from shipway.backends.docker.execs import run_in
from shipway.engine import Rolled
from tests.backends.docker.conftest import SLOT, Deployment, Lines
from tests.backends.docker.test_build import bridge_address
from tests.testenv.wheelhouse import Wheelhouse, ensure_wheels

DJANGO = Path(__file__).resolve().parents[3] / "examples" / "django"
DOCKERFILE = """\
ARG PYTHON_IMAGE
FROM ${PYTHON_IMAGE}
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ARG PIP_TRUSTED_HOST
WORKDIR /srv/guestbook
COPY requirements.txt .
RUN python3 -m venv /venv && /venv/bin/pip install --no-cache-dir -r requirements.txt
ENV PATH=/venv/bin:$PATH PYTHONUNBUFFERED=1
COPY . .
"""
#: GET /up on the container's own address (the ``Host`` a check sent before)
ASK_BY_ADDRESS = """
import urllib.error, urllib.request
try:
    print(urllib.request.urlopen("http://127.0.0.1:8000/up", timeout=10).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
"""


@pytest.fixture
def django_wheels(deployment: Deployment) -> Iterator[Wheelhouse]:
    house = Wheelhouse(ensure_wheels(DJANGO / "requirements.txt"))
    house.serve(bridge_address(deployment.env))
    yield house
    house.close()


def test_a_django_app_allowing_only_its_route_host_passes_its_gate(
    deployment: Deployment, django_wheels: Wheelhouse
) -> None:
    d, env = deployment, deployment.env
    shutil.copytree(DJANGO, d.dir, dirs_exist_ok=True)
    (d.dir / "Dockerfile").write_text(DOCKERFILE)
    host = f"{d.name}.example.test"
    address = django_wheels.url.split("//", 1)[1].split(":", 1)[0]
    d.hosts = [env.a]
    d.spec_file.write_text(
        f"""
[app]
name = "{d.name}"
image = "{env.image_prefix}/{d.name}"

[build]
host = "{env.a.url}"
args = {{ PYTHON_IMAGE = "{env.images.python}", PIP_FIND_LINKS = "{django_wheels.url}", \
PIP_NO_INDEX = "1", PIP_TRUSTED_HOST = "{address}" }}

[processes.web]
command = "gunicorn --bind 0.0.0.0:$PORT guestbook.wsgi"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "200ms"
attempts = 25

[env]
DJANGO_SETTINGS_MODULE = "guestbook.settings"
ALLOWED_HOSTS = "{host}"
SECRET_KEY = "test-only-{d.name}"

[slots.{SLOT}]
backend = "docker"
hosts = ["{env.a.url}"]
routes = [{{ host = "{host}", process = "web" }}]
proxy_image = "{env.images.proxy}"
proxy_port = {d.port}
drain_timeout = "1s"
"""
    )
    lines = Lines()
    outcome = api.deploy(api.load(d.spec_file), SLOT, build=True, reporter=lines, timeout=240)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()

    def get(name: str) -> tuple[int, str]:
        request = urllib.request.Request(
            f"http://{env.a.address}:{d.port}/up", headers={"Host": name}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    assert get(host) == (200, "ok\n")
    # Django's allowed-hosts check is on: the container's own address is refused
    [web] = d.containers(env.a, process="web")
    _, asked = run_in(web, ["python3", "-c", ASK_BY_ADDRESS])
    assert asked.decode().strip() == "400", asked
