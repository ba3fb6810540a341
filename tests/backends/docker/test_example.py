"""README's "A real app in three places", the docker slot: examples/notes as written names
its prerequisites (the socket, the images it pulls, the proxy's port) and the README says
them before the commands; the slot's spec validates, plans and deploys on test host A with
only what a user would change for their machine overridden — the host, the proxy's port,
the registry — plus what cannot be pulled here (the test's own Python base and proxy
images, its wheelhouse: see test_build.py)."""

from __future__ import annotations

import re
import shutil
import urllib.request

import pytest

from shipway import api
from shipway.engine import Rolled
from shipway.plan import Build
from shipway.spec import load
from tests.backends.docker.conftest import Deployment, Lines
from tests.backends.docker.test_build import NOTES, bridge_address
from tests.testenv.wheelhouse import Wheelhouse

README = NOTES.parents[1] / "README.md"


def test_the_example_and_the_readme_say_what_the_docker_slot_needs() -> None:
    slot = load(NOTES / "shipway.toml").slots.get("docker")
    assert [h.url for h in slot.hosts] == ["unix:///var/run/docker.sock"]
    assert slot.proxy_image == "caddy:2" and slot.proxy_port == 8080
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in (NOTES / "Dockerfile").read_text()
    text = README.read_text()
    section = text[text.index("### A real app in three places") :]
    before, commands = section.split("```sh", 1)
    for needed in ("/var/run/docker.sock", "localhost:5000", "python:3.11-slim", "caddy:2"):
        assert needed in before, needed
    assert f"port {slot.proxy_port} free" in before
    assert f"http://127.0.0.1:{slot.proxy_port}/" in commands.split("```", 1)[0]


def _override(text: str, key: str, value: str) -> str:
    """The docker slot's ``key`` set to ``value`` (the example's line, replaced)."""
    docker = text.index("[slots.docker]")
    head, tail = text[:docker], text[docker:]
    tail, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", tail, count=1)
    assert n == 1, key
    return head + tail


def test_the_docker_slot_plans_and_deploys_as_written_on_host_a(
    deployment: Deployment, wheelhouse: Wheelhouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment
    env = d.env
    shutil.copytree(NOTES, d.dir, dirs_exist_ok=True)
    address = bridge_address(env)
    wheelhouse.serve(address)
    text = (d.dir / "shipway.toml").read_text()
    text = text.replace('name = "notes"', f'name = "{d.name}"')
    text = text.replace('image = "localhost:5000/notes"', f'image = "{env.image_prefix}/{d.name}"')
    text = text.replace(
        '[build]\n',
        f'[build]\nargs = {{ PYTHON_IMAGE = "{env.images.python}", PIP_FIND_LINKS = '
        f'"{wheelhouse.url}", PIP_NO_INDEX = "1", PIP_TRUSTED_HOST = "{address}" }}\n',
    )
    text = _override(text, "hosts", f'["{env.a.url}"]')
    text = _override(text, "proxy_image", f'"{env.images.proxy}"')
    text = _override(text, "proxy_port", str(d.port))
    d.spec_file.write_text(text)
    d.hosts = [env.a]
    monkeypatch.setenv("DOCKER_HOST", env.a.url)  # the build's engine, as the README says
    app = api.load(d.spec_file)
    plan = api.plan(app, "docker", build=True)
    assert isinstance(plan.steps[0], Build) and plan.steps[0].kind == "image"
    outcome = api.deploy(app, "docker", build=True, reporter=Lines(), timeout=180)
    assert isinstance(outcome, Rolled), outcome.line()
    # the README's curl, with this slot's port: the route by host name, through the proxy
    request = urllib.request.Request(
        f"http://{env.a.address}:{d.port}/", headers={"Host": "notes.localhost"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200 and "<h1>notes</h1>" in answer.read().decode()
