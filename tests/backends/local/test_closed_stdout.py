"""Output piped to a reader that goes away (``shipway … | head``): a read ends quietly
with exit 0; an operation carries on to its outcome, says so once on stderr, and exits
with the outcome's code — never "unexpected error: BrokenPipeError"."""

from __future__ import annotations

import os
import subprocess

from tests.backends.local.conftest import Slot


def _closed_stdout(slot: Slot, *args: str) -> tuple[int, str]:
    """Run shipway with a standard output whose reader has already gone: (code, stderr)."""
    read, write = os.pipe()
    os.close(read)  # every write to it fails with EPIPE
    try:
        p = subprocess.run(
            slot.argv(*args),
            env=slot.env,
            cwd=slot.app_dir,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    return p.returncode, p.stderr


def test_a_read_piped_to_a_reader_that_went_away_ends_quietly(slot: Slot) -> None:
    code, err = _closed_stdout(slot, "plan", "local")
    assert (code, err) == (0, "")


def test_a_deploy_piped_to_a_reader_that_went_away_carries_on_to_its_outcome(
    slot: Slot,
) -> None:
    code, err = _closed_stdout(slot, "deploy", "local")
    assert code == 0, err
    assert "unexpected error" not in err and "Traceback" not in err
    assert "standard output was closed by its reader; the deploy carries on" in err
    assert slot.status()["deployed"]["revision"] == 1
    assert slot.get("/") == (200, "hello from r1\n")


def test_a_rollback_piped_with_its_stderr_to_a_reader_that_went_away_still_rolls(
    slot: Slot,
) -> None:
    """``shipway … 2>&1 | head``: both streams go; the operation still reaches its outcome."""
    slot.deploy()
    (slot.app_dir / "app.py").write_text((slot.app_dir / "app.py").read_text() + "# r2\n")
    slot.deploy()
    read, write = os.pipe()
    os.close(read)
    try:
        p = subprocess.run(
            slot.argv("rollback", "local"),
            env=slot.env,
            cwd=slot.app_dir,
            stdout=write,
            stderr=write,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert p.returncode == 0
    last = slot.history()[-1]
    assert (last["revision"], last["status"], last["description"]) == (
        3,
        "deployed",
        "rollback to r1",
    )
