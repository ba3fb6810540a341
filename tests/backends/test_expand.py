"""``$PORT`` and ``${NAME}`` in a process's command are expanded the same way on every
backend: the local launcher at each start, Docker and Kubernetes when they render — one
rule (shipway/backends/expand.py; the standalone launcher keeps a copy held to it here).
The commands ``shipway init`` writes (``--bind 0.0.0.0:$PORT``) and a Procfile's
(``web: gunicorn --bind 0.0.0.0:$PORT``) then run as written on Docker and Kubernetes."""

from __future__ import annotations

from typing import Any

import pytest

from shipway.backends.docker.render import render as docker_render
from shipway.backends.expand import expand
from shipway.backends.kubernetes.render import render as kube_render
from shipway.backends.local.launch import expand as launcher_expand
from shipway.release.model import ImageMeta, Release, ReleaseStatus
from tests.conftest import app_from_toml

SPEC = """
[app]
name = "shop"
image = "reg.example:5000/shop:1"

[env]
LEVEL = "info"

[secrets]
TOKEN = { from_env = "SHOP_TOKEN" }

[processes.web]
command = "gunicorn shop.wsgi --bind 0.0.0.0:$PORT --log-level ${LEVEL} --token $TOKEN $HOME"
port = 8000

[processes.shell]
command = "sh -c 'exec serve --port $PORT --token $TOKEN'"
port = 9000

[processes.worker]
command = "work --level $LEVEL --port $PORT"

[slots.docker]
backend = "docker"
hosts = ["unix:///var/run/docker.sock"]

[slots.k8s]
backend = "kubernetes"
"""

WORDS = {
    "web": [
        "gunicorn", "shop.wsgi", "--bind", "0.0.0.0:8000", "--log-level", "info",
        "--token", "$TOKEN", "$HOME",
    ],
    "shell": ["sh", "-c", "exec serve --port 9000 --token $TOKEN"],
    "worker": ["work", "--level", "info", "--port", "$PORT"],  # no port: no PORT
}  # fmt: skip


def release(slot: str) -> Release:
    return Release(
        app="shop",
        slot=slot,
        revision=1,
        status=ReleaseStatus.PENDING,
        image="reg.example:5000/shop:1",
        image_meta=ImageMeta("dockerfile", "/srv", 8000),
        deployment_ids={"web": "a1", "shell": "b2", "worker": "c3"},
    )


@pytest.mark.parametrize(
    "word",
    ["$PORT", "${PORT}", "127.0.0.1:$PORT", "$PORTS", "$$PORT", "${UNKNOWN}", "$TOKEN", "a$"],
)
def test_the_shared_rule_is_the_launchers(word: str) -> None:
    env = {"PORT": "8000", "PORTS": "many", "TOKEN": "placeholder"}
    assert expand(word, env, keep={"TOKEN"}) == launcher_expand(word, env, keep={"TOKEN"})


def test_docker_expands_the_declared_command() -> None:
    app = app_from_toml(SPEC).in_slot("docker")
    bodies: dict[str, Any] = {
        u.process: u.body for u in docker_render(app, app.slots.get("docker"), release("docker"))
        if u.kind == "container"
    }  # fmt: skip
    assert {p: b["args"] for p, b in bodies.items()} == WORDS
    assert bodies["web"]["env"]["PORT"] == "8000"


def test_kubernetes_expands_the_declared_command() -> None:
    app = app_from_toml(SPEC).in_slot("k8s")
    got = {}
    for unit in kube_render(app, app.slots.get("k8s"), release("k8s")):
        if unit.body.get("kind") == "Deployment":
            (container,) = unit.body["spec"]["template"]["spec"]["containers"]
            got[container["name"]] = container["args"]
    assert got == WORDS
