"""Live progress per process: redrawn in place on a terminal, plain lines otherwise."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.backends.kubernetes.conftest import BASE_ENV, Slot
from tests.cli.conftest import on_tty as terminal
from tests.cli.conftest import shipway

pytestmark = pytest.mark.k8s


def on_tty(slot: Slot, *args: str) -> tuple[int, str]:
    env = {**os.environ, **BASE_ENV, "KUBECONFIG": str(slot.kubeconfig)}
    env.pop("NO_COLOR", None)
    code, out, _ = terminal(shipway("-f", str(slot.spec_file), *args), env, Path.cwd())
    return code, out


def test_progress_is_redrawn_in_place_on_a_terminal(slot: Slot) -> None:
    slot.write()
    code, out = on_tty(slot, "deploy", "test1")
    assert code == 0, out
    # the wait is a live view redrawn in place (rich hides the cursor meanwhile), and its
    # last state stays as a line, in colour, with how long it took
    assert "\x1b[?25l" in out
    assert re.search(r"\x1b\[32m  web: desired 2 updated 2 ready 2 available 2 \(\d+\.\ds\)", out)
    assert "rolled shop/test1 from nothing to r1" in out


def test_progress_is_plain_lines_otherwise(slot: Slot) -> None:
    slot.write()
    result = slot.cli("deploy", "test1")
    assert result.returncode == 0
    assert "\x1b[" not in result.stdout
    assert "  web: desired 2 updated 2 ready 2 available 2\n" in result.stdout
