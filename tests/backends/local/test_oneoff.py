"""One-off commands (``shipway run SLOT -- CMD``) in the deployed release's environment on
this backend: its env and exit code, the guard, a terminal, what is left behind."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import time
from pathlib import Path

from tests.backends.local.conftest import API_TOKEN, Slot, children, releases
from tests.terminal import read_until


def test_run_prints_the_release_env_and_returns_the_commands_exit_code(notes: Slot) -> None:
    notes.deploy()
    show = "import os; print(os.environ['GREETING'], os.environ['SHIPWAY_RELEASE'], os.getcwd())"
    r = notes.run("run", "local", "--", "python3", "-c", show)
    assert r.code == 0, r.text
    greeting, release, cwd = r.out.split()
    assert (greeting, release) == ("hi", "r1")
    assert Path(cwd) == releases(notes) / "r1"  # in the release's own snapshot
    # a secret is the command's to print: its output is the user's; shipway's lines mask
    r = notes.run("run", "local", "--", "sh", "-c", f"echo $API_TOKEN; exit 7 # {API_TOKEN}")
    assert r.code == 7, r.text
    assert r.out == f"{API_TOKEN}\n"
    assert API_TOKEN not in r.err and "running sh -c" in r.err
    r = notes.run("run", "local", "--", "no-such-command")
    assert r.code == 127 and "no-such-command: command not found" in r.err


def test_run_is_refused_on_a_guarded_slot_without_confirm(notes: Slot) -> None:
    r = notes.run("deploy", "prod", "--confirm", "prod")
    assert r.code == 0, r.text
    touch = ["python3", "-c", "open('ran', 'w').write('yes')"]
    r = notes.run("run", "prod", "--", *touch)
    assert r.code == 3, r.text
    assert "production" in r.err and "--confirm prod" in r.err
    assert not (releases(notes, "prod") / "r1" / "ran").exists()  # nothing ran
    r = notes.run("run", "prod", "--confirm", "prod", "--", *touch)
    assert r.code == 0, r.text
    assert (releases(notes, "prod") / "r1" / "ran").read_text() == "yes"


def test_run_is_interactive_through_a_pseudo_terminal(notes: Slot) -> None:
    notes.deploy()
    code = "import sys; name = input('name? '); print('hello', name, sys.stdin.isatty())"
    main, sub = pty.openpty()
    p = subprocess.Popen(
        notes.argv("run", "local", "--", "python3", "-c", code),
        env=notes.env,
        cwd=notes.app_dir,
        stdin=sub,
        stdout=sub,
        stderr=sub,
        start_new_session=True,
    )
    os.close(sub)
    seen = b""
    try:
        seen = read_until(main, b"name? ", seen)
        os.write(main, b"Ada\n")
        seen = read_until(main, b"hello Ada True", seen)
        assert p.wait(timeout=30) == 0, seen.decode(errors="replace")
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
        os.close(main)


def _command(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return b""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"  # exited, not yet reaped by its new parent


def test_a_one_off_ends_when_its_shipway_is_killed(notes: Slot) -> None:
    """kill -9 runs no ``finally``: the command itself is asked to end when its parent
    dies (Linux's parent-death signal), so no one-off outlives the shipway that ran it."""
    notes.deploy()
    p = notes.spawn("run", "local", "--", "sleep", "600")
    try:
        deadline = time.monotonic() + 60
        # the one-off among its children (shipway runs git first, to say who acts)
        while not (kids := [k for k in children(p.pid) if _command(k) == b"sleep"]):
            assert time.monotonic() < deadline, "the one-off never started"
            assert p.poll() is None, p.communicate()
            time.sleep(0.05)
        [sleeper] = kids
    finally:
        p.kill()
        p.communicate(timeout=30)
    deadline = time.monotonic() + 30
    while not _gone(sleeper):
        assert time.monotonic() < deadline, f"the one-off {sleeper} outlived its shipway"
        time.sleep(0.05)
