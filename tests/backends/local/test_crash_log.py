"""A crash's excerpt reads the log of the start that crashed: supervisord may have started
the process again before the health gate told the crash, and that start's lines (the same
traceback again, a new startup) are left out; and the lines a crashing process printed last
reach its log even when supervisord has reaped it before they were stamped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from shipway.backends.local.health import crashed_start
from shipway.backends.local.launch import count_start, stamp
from shipway.backends.local.logfiles import parse
from shipway.backends.local.records import EnvFile, Instance
from shipway.backends.local.state import LAUNCHER
from tests.backends.local.conftest import children, eventually


def _instance(tmp_path: Path, starts_before: int = 0) -> Instance:
    return Instance(
        name="web.1",
        port=8000,
        env=tmp_path / "web.env.json",
        counter=tmp_path / "web.starts",
        log=tmp_path / "web.log",
        starts_before=starts_before,
    )


def _lines(*at_text: tuple[float, str]) -> list[tuple[float | None, str]]:
    return [parse(stamp(at).decode() + text) for at, text in at_text]


def test_the_lines_of_a_start_after_the_crash_are_left_out(tmp_path: Path) -> None:
    inst = _instance(tmp_path)
    count_start(str(inst.counter))
    count_start(str(inst.counter))  # started again: the launcher counts it, now
    again = inst.started_at()
    assert inst.starts() == 2 and again is not None
    lines = _lines(
        (again - 1.5, "Booting worker"),
        (again - 1.2, "SyntaxError: invalid syntax"),
        (again - 1.1, "Reason: Worker failed to boot."),
        (again + 0.0004, "Booting worker"),  # stamped to the millisecond, maybe before it
        (again + 0.2, "SyntaxError: invalid syntax"),
    )
    assert crashed_start(inst, lines) == 3
    # one start (its state told the crash), or a second one counted before this gate: all
    once = _instance(tmp_path, starts_before=1)
    assert crashed_start(once, lines) == len(lines)
    os.utime(inst.counter, (time.time(), again + 60))  # a start after all of them
    assert crashed_start(inst, lines) == len(lines)


def test_a_crash_stamped_after_the_later_start_is_kept_whole(tmp_path: Path) -> None:
    """The stamper stamps a line when it reads it: on a loaded machine the crash's own
    lines may carry a time after the later start. They are the cause; none is cut."""
    inst = _instance(tmp_path)
    count_start(str(inst.counter))
    count_start(str(inst.counter))
    again = inst.started_at()
    assert again is not None
    lines = _lines((again + 0.2, "worker cannot start"), (again + 0.3, "worker cannot start"))
    assert crashed_start(inst, lines) == 2


def test_the_last_lines_reach_the_log_when_supervisord_closed_the_pipe_first(
    tmp_path: Path,
) -> None:
    """supervisord reads a reaped process's output once more, then closes its pipe. Here
    the test is supervisord: the stamper is held stopped while the command prints its error
    and exits, the pipe is read and closed, and then the stamper goes on: the error is
    appended to the log the env file names, stamped."""
    inst = _instance(tmp_path)
    EnvFile.of({"PATH": os.environ["PATH"]}, []).write(inst.env, log=inst.log)
    assert json.loads(inst.env.read_text())["log"] == str(inst.log)
    inst.log.touch(mode=0o600)  # made before supervisord starts the program (private_log)
    command = ["sh", "-c", "read go; echo worker cannot start; exit 3"]
    launched = subprocess.Popen(
        [sys.executable, str(LAUNCHER), str(inst.env), str(inst.counter), "--", *command],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    assert launched.stdin is not None and launched.stdout is not None
    eventually(lambda: inst.starts() == 1, what="the launcher to count its start")
    (stamper,) = eventually(lambda: children(launched.pid), what="the stamper")
    os.kill(stamper, signal.SIGSTOP)
    try:
        launched.stdin.write(b"\n")
        launched.stdin.close()
        assert launched.wait(timeout=30) == 3
        os.set_blocking(launched.stdout.fileno(), False)
        assert launched.stdout.read() is None  # nothing yet: the stamper is stopped
        launched.stdout.close()  # as supervisord does once it has reaped the process
    finally:
        os.kill(stamper, signal.SIGCONT)
    text = eventually(lambda: inst.log.exists() and inst.log.read_text(), what="the log")
    assert text.endswith(" worker cannot start\n"), text
    (line,) = text.splitlines()
    stamped, said = parse(line)
    assert stamped is not None and said == "worker cannot start"
