"""What a command imports, in a fresh interpreter as a user runs it: a local-only command
loads none of the other engines' client libraries (the Docker SDK, paramiko, lightkube,
aiohttp), nor YAML for a TOML spec, nor rich off a terminal, nor shipway's Docker or
Kubernetes backends, nor the ``.shipwayignore`` matcher when the app has no such file; the
commands that only read load no engine.

Each of these is an import someone could add back at the top of a module (``api``, a
backend, ``appfiles``): then these fail. What the imports cost is measured by
``bench/cli_startup.py`` and ``bench/local_deploy.py``, never asserted here.
"""

from __future__ import annotations

import pytest

from tests.backends.local.conftest import Slot
from tests.cli.probe import run_loaded

#: what only another backend (or a YAML spec, or a terminal's live view) needs
CLIENTS = ("docker", "paramiko", "lightkube", "aiohttp", "yaml", "rich", "kubernetes")
OTHER_BACKENDS = ("shipway.backends.docker", "shipway.backends.kubernetes")


def loaded(slot: Slot, *args: str) -> tuple[int, str, list[str]]:
    """``shipway -f SPEC ARGS`` run by :data:`~tests.cli.probe.PROBE`: exit code, stdout,
    modules loaded."""
    run = run_loaded(["-f", str(slot.spec), *args], slot.env, slot.app_dir)
    return run.exit, run.stdout, run.modules


def foreign(modules: list[str]) -> list[str]:
    return [
        m
        for m in modules
        if m.split(".")[0] in CLIENTS or m.startswith(OTHER_BACKENDS) or m == "pathspec"
    ]


def test_a_local_plan_loads_no_other_engines_client(hello: Slot) -> None:
    code, out, modules = loaded(hello, "plan", "local")
    assert code == 0, out
    assert "create program/web@" in out  # it did plan, through the engine and the backend
    assert {"shipway.engine.core", "shipway.backends.local.backend"} <= set(modules)
    assert foreign(modules) == []


def test_a_local_deploy_loads_no_other_engines_client(hello: Slot) -> None:
    code, out, modules = loaded(hello, "deploy", "local")
    assert code == 0, out
    assert "rolled hello/local from nothing to r1" in out
    assert foreign(modules) == []


def test_a_shipwayignore_brings_its_matcher(hello: Slot) -> None:
    """The matcher is left out only when there is nothing for it to match."""
    (hello.app_dir / ".shipwayignore").write_text("notes/\n")
    code, out, modules = loaded(hello, "plan", "local")
    assert code == 0, out
    assert "pathspec" in modules


def test_validate_loads_no_engine_and_no_backend(hello: Slot) -> None:
    code, out, modules = loaded(hello, "validate")
    assert code == 0, out
    assert "hello" in out
    assert [m for m in modules if m.startswith(("shipway.engine", "shipway.backends"))] == []
    assert foreign(modules) == []


@pytest.mark.parametrize(("command", "says"), [("status", "running r1"), ("history", "deployed")])
def test_the_reads_load_no_engine(hello: Slot, command: str, says: str) -> None:
    hello.deploy()
    code, out, modules = loaded(hello, command, "local")
    assert code == 0, out
    assert says in out
    assert [m for m in modules if m.startswith("shipway.engine.")] == ["shipway.engine.timeouts"]
    assert foreign(modules) == []
