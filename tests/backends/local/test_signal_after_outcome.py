"""A signal that lands after the outcome was recorded cannot change the exit code: the
deploy is done (or undone) and its record says so, so the process says the signal and
exits with the outcome's code — never 143 as if the deploy had been cut short."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.backends.local.conftest import Slot

#: the CLI, with SIGTERM sent to itself at the moment the outcome is about to be printed
#: (the engine has recorded it and released the lock: the window the issue found)
SIGTERM_AT_THE_OUTCOME = """
import os, signal, sys
import shipway.cli.common as common
import shipway.cli.main as cli
shown = common.print_outcome
def outcome(obj, result, *rest):
    os.kill(os.getpid(), signal.SIGTERM)
    return shown(obj, result, *rest)
common.print_outcome = outcome
sys.argv = ["shipway", *sys.argv[1:]]
cli.main()
"""


@pytest.mark.parametrize(
    ("spec_change", "code", "line"),
    [
        (('GREETING = "hello"', 'GREETING = "howdy"'), 0, "rolled hello/local from r1 to r2"),
        (None, 0, "no changes: hello/local already runs"),
        (("[env]\n", "[env]\nHELLO_FAIL = \"1\"\n"), 10, "rolled back hello/local: r2 failed"),
    ],
)
def test_a_sigterm_after_the_outcome_exits_with_the_outcome(
    slot: Slot, spec_change: tuple[str, str] | None, code: int, line: str
) -> None:
    slot.deploy()
    if spec_change is not None:
        slot.edit_spec(*spec_change)
    proc = subprocess.run(
        [sys.executable, "-c", SIGTERM_AT_THE_OUTCOME, "-f", str(slot.spec), "deploy", "local"],
        env=slot.env,
        cwd=slot.app_dir,
        capture_output=True,
        text=True,
        timeout=180,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == code, text
    assert line in text
    assert "SIGTERM after the operation ended" in text
    assert proc.returncode != 128 + signal.SIGTERM
    releases = {r["revision"]: r["status"] for r in slot.history()}
    if spec_change is None:  # no changes: nothing recorded
        assert releases == {1: "deployed"}
    else:
        assert releases[2] == ("deployed" if code == 0 else "failed")
