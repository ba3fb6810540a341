"""The release command on this machine: a hanging one is stopped at its timeout with
everything it started; an interrupted deploy stops it too; one a deploy killed with SIGKILL
left running is stopped by the next deploy before it runs its own — never two at once,
never an orphan."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.backends.local.conftest import Slot, eventually

# a shell that writes its pid, starts a child and a grandchild that write theirs, and waits
HANGING = (
    'release_command = ["sh", "-c", "echo $$ >> {pidfile}; sleep 600 & echo $! >> {pidfile}; '
    "sh -c 'echo $$ >> {pidfile}; sleep 600' & wait\"]\n"
)


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (a zombie has ended)."""
    out = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2 :].split()[0] != "Z":
            out.append(pid)
    return out


def hanging(slot: Slot, tmp_path: Path, timeout: str | None = None) -> Path:
    pidfile = tmp_path / "release.pid"
    extra = HANGING.format(pidfile=pidfile)
    if timeout is not None:
        extra += f'release_timeout = "{timeout}"\n'
    slot.edit_spec('name = "hello"\n', 'name = "hello"\n' + extra)
    return pidfile


def started(pidfile: Path) -> list[int]:
    """The release command's processes (the shell first), once all three run."""
    return eventually(
        lambda: len(pids := [int(p) for p in pidfile.read_text().split()]) >= 3
        and len(alive(pids)) == 3
        and pids,
        what="the release command and its children",
    )


def test_a_hanging_release_command_is_stopped_with_all_it_started(
    slot: Slot, tmp_path: Path
) -> None:
    slot.deploy()
    pidfile = hanging(slot, tmp_path, timeout="2s")
    r = slot.deploy(expect=10)
    assert "ReleaseCommandTimeout" in r.out, r.text
    assert "release_timeout (2s)" in r.out
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 3 and alive(pids) == []  # the shell, its child, its grandchild
    assert slot.get("/") == (200, "hello from r1\n")


def test_an_interrupted_deploy_stops_its_release_command(slot: Slot, tmp_path: Path) -> None:
    slot.deploy()
    pidfile = hanging(slot, tmp_path)
    proc = slot.spawn("deploy", "local")
    pids = started(pidfile)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert alive(pids) == [], out
    assert slot.get("/") == (200, "hello from r1\n")


def test_a_release_command_left_by_a_killed_deploy_is_stopped_by_the_next(
    slot: Slot, tmp_path: Path
) -> None:
    slot.deploy()
    pidfile = hanging(slot, tmp_path)
    proc = slot.spawn("deploy", "local")
    pids = started(pidfile)
    proc.send_signal(signal.SIGKILL)  # no handler runs: its 4 processes are orphaned
    proc.communicate(timeout=30)
    assert alive(pids) == pids

    slot.edit_spec(HANGING.format(pidfile=pidfile), 'release_command = "true"\n')
    r = slot.deploy()
    assert (
        f"stopped the release command of r2 (pid {pids[0]}, 4 processes) left "
        "running by an earlier deploy" in r.out
    ), r.text
    assert alive(pids) == []


def test_a_release_command_string_that_needs_a_shell_runs_under_sh_like_a_procfile_line(
    slot: Slot, tmp_path: Path
) -> None:
    # one rule for both: `&&` and `>` are the shell's, as in a Procfile's release: line
    done = tmp_path / "migrated"
    slot.edit_spec(
        'name = "hello"\n',
        f'name = "hello"\nrelease_command = "echo first > {done} && echo second >> {done}"\n',
    )
    r = slot.deploy()
    assert done.read_text() == "first\nsecond\n", r.text
    assert "release | first" not in r.out  # not echo's words: the shell's redirection


def test_a_release_command_list_is_its_words_exactly(slot: Slot, tmp_path: Path) -> None:
    slot.edit_spec(
        'name = "hello"\n', 'name = "hello"\nrelease_command = ["echo", "a && b > c"]\n'
    )
    r = slot.deploy()
    assert "release | a && b > c" in r.out, r.text


def test_a_release_command_s_last_line_shows_even_without_its_newline(slot: Slot) -> None:
    # a migration that ends with its error, written without a newline, then exits 1
    slot.edit_spec(
        'name = "hello"\n',
        'name = "hello"\nrelease_command = ["sh", "-c", "echo applying; printf \'no such '
        'table: orders\'; exit 1"]\n',
    )
    r = slot.deploy(expect=12)  # the release command failed: nothing was running before
    assert "release | applying" in r.out, r.text
    assert "release | no such table: orders" in r.out, r.text
