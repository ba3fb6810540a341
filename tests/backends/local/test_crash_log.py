"""A crash's excerpt reads the log of the start that crashed: supervisord may have started
the process again before the health gate told the crash, and that start's lines (the same
traceback again, a new startup) are left out."""

from __future__ import annotations

import os
import time
from pathlib import Path

from shipway.backends.local.health import crashed_start
from shipway.backends.local.launch import count_start, stamp
from shipway.backends.local.logfiles import parse
from shipway.backends.local.records import Instance


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
