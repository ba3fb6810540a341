"""Pins the public API: growing or shrinking it must be a visible decision. And the README's
Python API snippet runs as written, for real, against local slots in a tmp dir."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import shipway
from shipway.backends.local.supervisor import Supervisor
from tests.testenv.ports import free_port

REPO = Path(__file__).resolve().parents[1]
HELLO = REPO / "examples" / "hello"

EXPECTED = [
    "App", "Backend", "BackendError", "Change", "Clearance", "ClearanceError",
    "ConfirmationMismatch", "ConfirmationRequired", "DeployRequest", "Diff", "Engine", "Guard",
    "GuardRefused",
    "InputError", "Interrupted", "NoAnchor", "Outcome", "Plan", "Release", "ReleaseStatus",
    "Reporter", "RollbackFailed", "Rolled", "RolledBack", "ShipwayError", "Slot", "SlotLocked",
    "SlotStatus", "SpecInvalid", "StalePlan", "Target", "Unchanged", "__version__", "build",
    "clear", "deploy", "destroy", "diff", "helm_history", "helm_release", "history", "load",
    "logs", "plan", "promote", "repair", "restart", "rollback", "run", "set_image", "status",
    "stop",
]  # fmt: skip

# The slots the README's snippet names (staging is planned, prod deployed), both local.
SLOTS = """
[slots.staging]
role = "staging"
promotes_to = "prod"

[slots.prod]
role = "production"
"""


def test_public_api_is_exactly_this() -> None:
    assert shipway.__all__ == EXPECTED


def test_all_is_sorted_and_resolvable() -> None:
    assert shipway.__all__ == sorted(shipway.__all__)
    for name in shipway.__all__:
        assert getattr(shipway, name) is not None


def python(code: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """``code`` in a fresh interpreter (imports start from nothing); its stdout."""
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert p.returncode == 0, f"exit {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.mark.parametrize(
    "imports",
    [
        "import shipway.plan\nimport shipway",  # the subpackage first
        "import shipway\nshipway.load\nimport shipway.plan.model",  # the package first
        "import shipway.engine.core\nfrom shipway import plan as _",  # through the engine
    ],
    ids=["subpackage-first", "package-first", "engine-first"],
)
def test_shipway_plan_is_the_function_however_the_subpackage_was_imported(imports: str) -> None:
    out = python(
        f"{imports}\nimport shipway, shipway.api\n"
        "from shipway import plan\n"
        "from shipway.plan import Plan\n"
        "print(shipway.plan is shipway.api.plan, plan is shipway.api.plan,"
        " Plan is shipway.Plan, callable(shipway.plan))\n"
    )
    assert out.split() == ["True", "True", "True", "True"]


def readme_snippet() -> str:
    """The code block under the README's "Python API" heading, as written."""
    section = (REPO / "README.md").read_text().split("\n## Python API\n", 1)[1]
    found = re.match(r"\s*```python\n(.*?)```", section, re.DOTALL)
    assert found, "README.md: no python block right under ## Python API"
    return found.group(1)


@pytest.fixture
def app_dir(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """The hello example with the README's slots, a state dir and a router port of its own;
    supervisord (and what it runs) shut down after."""
    app = tmp_path / "hello"
    shutil.copytree(HELLO, app, ignore=shutil.ignore_patterns("__pycache__", "shipway-*"))
    spec = app / "shipway.toml"
    spec.write_text(spec.read_text() + SLOTS)
    state = tmp_path / "state"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIPWAY_", "XDG_STATE"))}
    env.update(SHIPWAY_STATE_DIR=str(state), SHIPWAY_ROUTER_PORT=str(port))
    try:
        yield app, env
    finally:
        Supervisor(state / "supervisor").shutdown()


def test_the_readme_python_api_snippet_runs_as_written(
    app_dir: tuple[Path, dict[str, str]],
) -> None:
    cwd, env = app_dir
    snippet = readme_snippet()
    assert 'shipway.plan(app, "staging")' in snippet and "shipway.deploy(" in snippet
    lines = python(snippet, cwd=cwd, env=env).splitlines()
    # the plan of staging, described; then the deploy of prod, and its exit code
    assert lines[0].startswith("deploy hello to slot staging (local): release r1")
    assert any(line.strip().startswith("1. ") for line in lines[1:-1])
    assert re.fullmatch(r"rolled hello/prod from nothing to r1\b.* 0", lines[-1]), lines[-1]
    # prod really serves r1 through the router; staging was only planned, never deployed
    conn = http.client.HTTPConnection("127.0.0.1", int(env["SHIPWAY_ROUTER_PORT"]), timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": "prod.hello.localhost"})
        response = conn.getresponse()
        assert (response.status, response.read()) == (200, b"hello from r1\n")
    finally:
        conn.close()
    assert not (Path(env["SHIPWAY_STATE_DIR"]) / "hello" / "staging").exists()
