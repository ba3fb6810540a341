"""Shared fixtures. Test environments (Docker hosts, the Kubernetes control plane) are
pytest plugins under tests/testenv/, started once per session when a test needs them."""

from __future__ import annotations

import json
import os
import signal
import threading
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from shipway.spec import App, parse

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
        items.sort(key=lambda item: -known.get(item.nodeid, 0.0))


def app_from_toml(text: str, base_dir: Path | None = None) -> App:
    return parse(tomllib.loads(text), file="shipway.toml", base_dir=base_dir or Path("."))


@pytest.fixture
def make_app(tmp_path: Path) -> Callable[[str], App]:
    def make(text: str) -> App:
        return app_from_toml(text, tmp_path)

    return make


@pytest.fixture(autouse=True)
def _signals_as_they_were(request: pytest.FixtureRequest) -> object:
    """SIGINT and SIGTERM as each test found them. A test that leaves one ignored in the
    worker (an in-process operation cut short) would make every process the worker starts
    later ignore it too (an ignored signal outlives exec): a ``logs -f`` that SIGINT must
    stop then never stops. Put back, and said as a warning naming the test."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        if handler is not None and signal.getsignal(sig) != handler:
            warnings.warn(
                f"{request.node.nodeid} left {sig.name} as {signal.getsignal(sig)!r}: put back",
                stacklevel=1,
            )
            signal.signal(sig, handler)
