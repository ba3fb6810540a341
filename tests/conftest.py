"""Shared fixtures. Test environments (Docker hosts, the Kubernetes control plane) are
pytest plugins under tests/testenv/, started once per session when a test needs them."""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from shipway.spec import App, parse
from tests.testenv.ports import program_ports

pytest_plugins = [
    "tests.testenv.docker",
    "tests.testenv.acme",
    "tests.testenv.k8s",
    "tests.testenv.wheelhouse",
]


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A pytest-xdist worker starts with COLUMNS=80 and LINES=24 in its environment (GNU
        # readline exports the size it finds): the shipway processes the tests start would
        # take them over a terminal's real size. A serial run has neither; nor do workers.
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)
    # the local backend's programs get their ports from this worker's own span (each state
    # directory coordinates its own ports only): two tests deploying at once never pick
    # the same port (tests/testenv/ports.py, program_ports)
    os.environ.setdefault("SHIPWAY_LOCAL_PORTS", program_ports())


#: seconds each slow test took in a whole run (``python -m tests.durations LOG`` writes it
#: from a run's ``--durations=0`` output); the tests not in it took a few seconds at most
DURATIONS = Path(__file__).with_name("durations.json")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest tests first. With several workers each takes the next test as it frees
    up, so the run ends when the last test to start ends: started last, a 100-second test
    keeps one worker busy while the others have nothing left (docs/testing.md, *Order*).
    Tests are independent, so any order passes; ties keep the collection's order."""
    known: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    if known:
        items.sort(key=lambda item: -known.get(ungrouped(item.nodeid), 0.0))


def ungrouped(nodeid: str) -> str:
    """A test's id without the ``@group`` pytest-xdist adds to a test of an xdist_group."""
    return GROUP_SUFFIX.sub("", nodeid)


#: what pytest-xdist adds to the id of a test marked ``xdist_group(name)`` (loadgroup)
GROUP_SUFFIX = re.compile(r"@[A-Za-z0-9_]+$")


def app_from_toml(text: str, base_dir: Path | None = None) -> App:
    return parse(tomllib.loads(text), file="shipway.toml", base_dir=base_dir or Path("."))


@pytest.fixture
def make_app(tmp_path: Path) -> Callable[[str], App]:
    def make(text: str) -> App:
        return app_from_toml(text, tmp_path)

    return make
