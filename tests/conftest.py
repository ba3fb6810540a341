"""Shared fixtures. Test environments (Docker hosts, the Kubernetes control plane) are
pytest plugins under tests/testenv/, started once per session when a test needs them."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from shipway.spec import App, parse

pytest_plugins = ["tests.testenv.docker", "tests.testenv.k8s", "tests.testenv.wheelhouse"]


def app_from_toml(text: str, base_dir: Path | None = None) -> App:
    return parse(tomllib.loads(text), file="shipway.toml", base_dir=base_dir or Path("."))


@pytest.fixture
def make_app(tmp_path: Path) -> Callable[[str], App]:
    def make(text: str) -> App:
        return app_from_toml(text, tmp_path)

    return make
