"""The failure excerpt: the first error-looking block and the tail, each once."""

from __future__ import annotations

from shipway.backends.excerpt import TIMES, excerpt

NOISE = [f"[INFO] request {i} ok" for i in range(100)]
TRACEBACK = [
    "[2026-12-01 10:00:00 +0000] [42] [ERROR] Exception in worker process",
    "Traceback (most recent call last):",
    '  File "/app/gunicorn/arbiter.py", line 609, in spawn_worker',
    "    worker.init_process()",
    '  File "/app/shop/settings.py", line 3',
    "    DEBUG = = True",
    "            ^",
    "SyntaxError: invalid syntax",
]
SHUTDOWN = [
    "[2026-12-01 10:00:01 +0000] [42] [INFO] Worker exiting (pid: 42)",
    "[2026-12-01 10:00:01 +0000] [41] [INFO] Shutting down: Master",
    "[2026-12-01 10:00:01 +0000] [41] [INFO] Reason: Worker failed to boot.",
]


def test_the_first_traceback_and_the_tail_once_each() -> None:
    lines = ["[INFO] Starting gunicorn", *TRACEBACK, *NOISE, *SHUTDOWN]
    found = excerpt(lines)
    assert found.block == tuple(TRACEBACK)  # from the error line to the exception line
    assert found.block_start == 2
    assert found.tail == tuple(lines[-12:])
    shown = found.lines("/logs/web.log", "shipway logs local --release 3")
    assert shown[0] == "first error in its log (from line 2):"
    assert shown.count("| SyntaxError: invalid syntax") == 1
    assert shown[-1] == "full log: shipway logs local --release 3"


def test_a_block_inside_the_tail_is_shown_once_in_it() -> None:
    lines = [*NOISE[:5], *TRACEBACK, *SHUTDOWN]
    found = excerpt(lines)
    assert found.block == ()
    assert found.tail == tuple(lines[-12:])
    assert sum("SyntaxError" in line for line in found.lines("x.log")) == 1


def test_a_block_overlapping_the_tail_is_not_repeated_by_it() -> None:
    lines = [*NOISE[:20], *TRACEBACK, *NOISE[:6]]
    found = excerpt(lines)
    assert found.block == tuple(TRACEBACK)
    assert found.tail == tuple(NOISE[:6])  # only what the block did not show


def test_go_panics_and_error_lines_are_blocks_too() -> None:
    panic = ["panic: runtime error: index out of range [3] with length 3", "",
             "goroutine 1 [running]:", "main.main()", "\t/src/main.go:8 +0x1d",
             "exit status 2"]  # fmt: skip
    found = excerpt([*NOISE[:30], *panic, "restarting", *NOISE[:20]])
    assert found.block == tuple(panic)
    npm = ["npm ERR! code ELIFECYCLE", "npm ERR! errno 1"]
    assert excerpt([*NOISE[:30], *npm, *NOISE[:20]]).block == (npm[0],)
    plain = excerpt(NOISE)
    assert plain.block == () and plain.tail == tuple(NOISE[-12:])
    assert excerpt([]).lines("w.log") == ["its log (w.log) is empty"]


def test_a_long_traceback_keeps_its_start_and_its_exception() -> None:
    frames = [f'  File "/lib/m{i}.py", line {i}, in f{i}' for i in range(60)]
    long = [*TRACEBACK[:2], *frames, *TRACEBACK[2:]]
    found = excerpt([*long, *NOISE])
    assert found.block[:2] == tuple(TRACEBACK[:2])
    assert found.block[-1] == "SyntaxError: invalid syntax"
    assert len(found.block) == 40 and found.block[3].startswith("… (")


def test_a_line_repeated_back_to_back_is_shown_once_with_its_count() -> None:
    start = ["hello r2 listening on 127.0.0.1:8000"]
    probe = '127.0.0.1 "GET /up HTTP/1.1" 500 - (failing on purpose)'
    shown = excerpt([*start, *[probe] * 25]).lines("web.log")
    assert shown == [
        "last lines of its log (web.log):",
        f"| {start[0]}",  # the tail reaches back past the repeats
        f"| {probe} … ({TIMES}25)",
    ]


def test_a_crash_repeated_by_a_restart_is_one_line_of_the_tail() -> None:
    # the supervisor started the process again before the failure was told: the second
    # crash's traceback (other times and pids) is in the tail
    again = [line.replace("[42]", "[57]").replace("10:00:00", "10:00:02") for line in TRACEBACK]
    assert again != TRACEBACK
    lines = ["[INFO] Starting gunicorn", *TRACEBACK, *SHUTDOWN, *NOISE[:3], *again, *SHUTDOWN]
    found = excerpt(lines)
    assert found.block == tuple(TRACEBACK)
    first = 2 + len(TRACEBACK) + len(SHUTDOWN) + 3  # where the repeat starts, 1-based
    # the repeat is one line saying where, and one of the tail's 12: the tail reaches back
    assert found.tail == (
        *SHUTDOWN,
        *NOISE[:3],
        f"… the first error again (lines {first}-{first + len(again) - 1})",
        *SHUTDOWN,
    )
    assert found.tail_start == 2 + len(TRACEBACK)
    shown = found.lines("x.log")
    assert sum("SyntaxError" in line for line in shown) == 1


def test_a_crash_repeated_back_to_back_is_counted_in_one_line() -> None:
    error = ["ERROR: database unreachable after 3 tries"]
    lines = [*NOISE[:20], *error, *NOISE[:20], *(error * 29), "giving up"]
    lines[41] = "ERROR: database unreachable after 4 tries"  # the same but for a number
    found = excerpt(lines)
    assert found.block == tuple(error)
    assert found.tail == (*NOISE[10:20], f"… the first error again {TIMES}29 (lines 42-70)",
                          "giving up")  # fmt: skip
    other = ["ERROR: cache unreachable after 3 tries"]  # another error is a line of the tail
    tail = excerpt([*NOISE[:20], *error, *NOISE[:20], *other, "giving up"]).tail
    assert tail == (*NOISE[10:20], *other, "giving up")
