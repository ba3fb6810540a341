"""``shipway run`` on this machine: ``-e KEY=VALUE`` (and ``-e KEY``, this shell's value)
reaches the command over the release's env — the caller's ``DJANGO_SUPERUSER_*`` for
``createsuperuser --noinput`` — and a command on a terminal gets the terminal's ``TERM``."""

from __future__ import annotations

import os
import pty
import subprocess

from tests.backends.local.conftest import Slot
from tests.terminal import read_until


def test_env_given_with_e_reaches_the_command_over_the_releases(hello: Slot) -> None:
    hello.deploy()
    hello.env["FROM_SHELL"] = "shell-value"
    r = hello.run(
        "run", "local", "-e", "DJANGO_SUPERUSER_USERNAME=ann", "-e", "GREETING=over",
        "-e", "FROM_SHELL", "--",
        "sh", "-c", "echo $DJANGO_SUPERUSER_USERNAME $GREETING $FROM_SHELL",
    )  # fmt: skip
    assert r.code == 0, r.text
    assert r.out == "ann over shell-value\n"
    bad = hello.run("run", "local", "-e", "1X=y", "--", "true")
    assert bad.code == 2 and "-e '1X': not a variable name" in bad.err, bad.text
    unset = hello.run("run", "local", "-e", "NOT_SET_ANYWHERE", "--", "true")
    assert unset.code == 2 and "NOT_SET_ANYWHERE: not set in this shell" in unset.err


def test_a_command_on_a_terminal_gets_its_term(hello: Slot) -> None:
    hello.deploy()
    main, sub = pty.openpty()
    p = subprocess.Popen(
        hello.argv("run", "local", "--", "sh", "-c", "echo term=[$TERM]"),
        stdin=sub, stdout=sub, stderr=sub, start_new_session=True, cwd=hello.app_dir,
        env={**hello.env, "TERM": "xterm-256color"},
    )  # fmt: skip
    os.close(sub)
    try:
        seen = read_until(main, b"term=[xterm-256color]")
        assert p.wait(timeout=60) == 0, seen
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(main)
