"""One-off commands (``shipway run SLOT -- CMD``) in the deployed release's environment on
this backend: its env and exit code, the guard, a terminal, what is left behind."""

from __future__ import annotations

import os
import pty
import signal
import sys
import time

import pytest

from shipway.engine import Rolled
from tests import cliproc
from tests.backends.docker.conftest import SLOT, Deployment, ssh_environ
from tests.backends.docker.test_release_phase import SECRET, TOKEN, events, kind, shipway
from tests.terminal import read_until


def test_run_prints_the_release_env_returns_its_code_and_removes_its_container(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = deployment.env
    deployment.write(extra=f'[env]\nMARKER = "m-1"\n{SECRET}')
    monkeypatch.setenv("SHIPWAY_TEST_TOKEN", TOKEN)
    assert isinstance(deployment.deploy(), Rolled)
    r = shipway(deployment, "run", SLOT, "--", "sh", "-c", "echo $MARKER $API_TOKEN; exit 7")
    assert r.returncode == 7, r.stderr
    assert r.stdout == f"m-1 {TOKEN}\n"  # the command's own output: the user's, unmasked
    assert TOKEN not in r.stderr and "one-off container" in r.stderr
    assert "on docker-a" in r.stderr
    # standard input passed through (-i), on the SSH host too
    r = shipway(deployment, "run", SLOT, "-i", "--host", "10.231.0.2", "--", "cat", stdin="hi\n")
    assert (r.returncode, r.stdout) == (0, "hi\n"), r.stderr
    assert "on 10.231.0.2" in r.stderr
    r = shipway(deployment, "run", SLOT, "--", "no-such-command")
    assert r.returncode == 127, r.stderr
    r = shipway(deployment, "run", SLOT, "--host", "nowhere", "--", "true")
    assert r.returncode == 2 and "not a host of slot" in r.stderr
    for host in (env.a, env.b):
        assert deployment.containers(host, kind="one-off") == []  # removed every time


def test_run_is_refused_on_a_guarded_slot_without_confirm(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a], slot_extra='role = "production"')
    assert isinstance(deployment.deploy(confirm=SLOT), Rolled)
    since = time.time()
    r = shipway(deployment, "run", SLOT, "--", "true")
    assert r.returncode == 3 and f"--confirm {SLOT}" in r.stderr
    assert [e for e in events(deployment, env.a, since) if kind(e) == "one-off"] == []
    r = shipway(deployment, "run", SLOT, "--confirm", SLOT, "--", "true")
    assert r.returncode == 0, r.stderr


def test_run_gives_the_command_a_terminal(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    main, sub = pty.openpty()
    p = cliproc.ShipwayProcess(
        [sys.executable, "-m", "shipway", "-f", str(deployment.spec_file), "run", SLOT, "--",
         "sh"],
        stdin=sub, stdout=sub, stderr=sub, start_new_session=True,
        env={**os.environ, **ssh_environ(env)},
    )  # fmt: skip
    os.close(sub)
    seen = b""
    try:
        seen = read_until(main, b"/app # ", seen)  # the shell's prompt, on its terminal
        if b"\x1b[6n" in seen:  # its line editor asks the terminal where the cursor is
            os.write(main, b"\x1b[1;8R")
        os.write(main, b"tty && echo on-a-ter''minal\n")
        seen = read_until(main, b"on-a-terminal", seen)
        os.write(main, b"exit 4\n")
        assert p.wait(timeout=60) == 4, seen.decode(errors="replace")
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
        os.close(main)
    assert b"/dev/pts/" in seen  # the command's own terminal, in the container
    assert deployment.containers(env.a, kind="one-off") == []
