"""A local build has a deadline and leaves nothing running: a hanging build command is
stopped at ``app.build_timeout`` with everything it started; an interrupted deploy stops
its build too; one a deploy killed with SIGKILL left running is stopped by the next
build on the slot before it builds — never an orphan building beside the next build."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.backends.local.conftest import Slot
from tests.backends.local.test_release_command import alive, started

# a build that writes its pid, starts a child and a grandchild that write theirs, and waits
HANGING = (
    'build = ["sh", "-c", "echo $$ >> {pidfile}; sleep 600 & echo $! >> {pidfile}; '
    "sh -c 'echo $$ >> {pidfile}; sleep 600' & wait\"]\n"
)


def hanging(slot: Slot, tmp_path: Path, timeout: str | None = None) -> Path:
    pidfile = tmp_path / "build.pid"
    extra = HANGING.format(pidfile=pidfile)
    if timeout is not None:
        extra += f'build_timeout = "{timeout}"\n'
    slot.edit_spec('name = "hello"\n', 'name = "hello"\n' + extra)
    return pidfile


def test_a_hanging_build_is_stopped_at_its_timeout_with_all_it_started(
    slot: Slot, tmp_path: Path
) -> None:
    slot.deploy()
    pidfile = hanging(slot, tmp_path, timeout="2s")
    r = slot.deploy(expect=10)
    assert "did not finish within the build's timeout (app.build_timeout" in r.out, r.text
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 3 and alive(pids) == []  # the shell, its child, its grandchild
    assert slot.get("/") == (200, "hello from r1\n")


def test_an_interrupted_deploy_stops_its_build(slot: Slot, tmp_path: Path) -> None:
    slot.deploy()
    pidfile = hanging(slot, tmp_path)
    proc = slot.spawn("deploy", "local")
    pids = started(pidfile)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert alive(pids) == [], out
    assert slot.get("/") == (200, "hello from r1\n")


def test_a_build_left_by_a_killed_deploy_is_stopped_by_the_next(slot: Slot, tmp_path: Path) -> None:
    slot.deploy()
    pidfile = hanging(slot, tmp_path)
    proc = slot.spawn("deploy", "local")
    pids = started(pidfile)
    proc.send_signal(signal.SIGKILL)  # no handler runs: its 4 processes are orphaned
    proc.communicate(timeout=30)
    assert alive(pids) == pids

    slot.edit_spec(HANGING.format(pidfile=pidfile), 'build = "true"\n')
    r = slot.deploy()
    assert f"stopped a build (the build command, pid {pids[0]}, 4 processes) left" in r.out, r.text
    assert alive(pids) == []
