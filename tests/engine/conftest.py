"""The fixtures of the engine's sequencing tests: the shop app of ``test_sequencing``, a
fresh in-memory backend, and a reporter that keeps its lines (a module may declare its own
``app``)."""

from __future__ import annotations

import pytest

from shipway.backends.memory import MemoryBackend
from shipway.spec import App
from tests.conftest import app_from_toml
from tests.engine.test_sequencing import SPEC, Lines


@pytest.fixture
def app() -> App:
    return app_from_toml(SPEC)


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
def out() -> Lines:
    return Lines()
