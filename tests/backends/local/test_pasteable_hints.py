"""The commands shipway suggests can be pasted as they are: with the ``-f FILE`` the user
typed; and ``-f`` typed after the command is refused with the line that works."""

from __future__ import annotations

import shlex
import sys

from tests import cliproc
from tests.backends.local.conftest import Slot


def test_a_suggested_command_carries_the_spec_file_the_user_gave(slot: Slot) -> None:
    failing = slot.app_dir / "shipway-failing.toml"
    r = slot.deploy(expect=12, spec=failing)
    hint = f"shipway -f {shlex.quote(str(failing))} logs local web --release 1"
    assert f"full log: {hint}" in r.out, r.out
    # and it works as printed
    assert "failing on purpose" in slot.run(*shlex.split(hint)[3:], spec=failing).out


def test_f_after_the_command_is_refused_with_the_line_that_works(slot: Slot) -> None:
    p = cliproc.run(
        [sys.executable, "-m", "shipway", "plan", "local", "-f", str(slot.app_dir)],
        env=slot.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert p.returncode == 2
    want = f"-f goes before the command (hint: shipway -f {slot.app_dir} plan local)"
    assert want in p.stderr, p.stderr
