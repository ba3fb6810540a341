"""The health gate's pace: an app that starts listening between two probes is ready then,
not at the next interval; a failure still takes its attempts, one per interval."""

from __future__ import annotations

import time

from shipway.backends.excerpt import TIMES
from tests.backends.local.conftest import Slot

# the web process binds its port only 3 s after it starts: the gate's first probe is
# refused (nothing listens yet)
LATE_WEB = (
    "command = \"python3 -c 'import time, runpy; time.sleep(3); "
    "runpy.run_path(\\\"app.py\\\", run_name=\\\"__main__\\\")'\""
)


def test_an_app_listening_after_a_refused_probe_is_ready_before_the_next_interval(
    slot: Slot,
) -> None:
    slot.edit_spec('command = "python3 app.py"', LATE_WEB)
    # the next counted probe would come after 120 s: beyond the rollout's 60 s budget
    slot.edit_spec('interval = "200ms"', 'interval = "120s"')
    slot.edit_spec("attempts = 25", "attempts = 2")
    r = slot.deploy("--timeout", "60")
    assert "rolled" in r.out
    assert slot.get("/") == (200, "hello from r1\n")


def test_a_listening_app_that_fails_its_check_still_fails_after_its_attempts(
    slot: Slot,
) -> None:
    failing = slot.app_dir / "shipway-failing.toml"  # /up answers 500: every 0.2 s, 25 times
    r = slot.deploy(expect=12, spec=failing)
    assert "GET /up answered 500" in r.out
    assert "failed 25 times (every 0.2s)" in r.out
    # its log is that one access line again and again: shown once, with its count
    probe = '"GET /up HTTP/1.1" 500 - (HELLO_FAIL=1: failing on purpose)'
    assert sum(probe in line for line in r.out.splitlines()) == 1, r.out
    assert f"{probe} … ({TIMES}" in r.out


# binds and listens (a backlog of one) but never accepts: connects hang once the backlog
# is full, and no request is ever answered
NO_ACCEPT = """\
import os, socket, time
s = socket.socket()
s.bind(("127.0.0.1", int(os.environ["PORT"])))
s.listen(1)
while True:
    time.sleep(60)
"""


def test_a_process_that_listens_but_never_accepts_fails_after_its_attempts(slot: Slot) -> None:
    (slot.app_dir / "noaccept.py").write_text(NO_ACCEPT)
    slot.edit_spec('command = "python3 app.py"', 'command = "python3 noaccept.py"')
    slot.edit_spec("attempts = 25", "attempts = 5")
    started = time.monotonic()
    r = slot.deploy("--timeout", "120", expect=12)
    took = time.monotonic() - started
    # 5 probes, each waiting its 1 s timeout, one per 0.2 s: far from the 120 s deadline
    assert "health check failed 5 times (every 0.2s)" in r.out, r.text
    assert "deadline" not in r.text
    assert took < 60, f"the gate took {took:.0f}s"
