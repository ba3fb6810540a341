"""Output fit for a terminal: colour and live progress on a terminal, plain lines when piped
or with NO_COLOR, a wait that says what it waits for at least every 5 s, and a history
that fits the width."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from shipway.cli.term import plain
from tests.backends.local.conftest import Result, Slot
from tests.cli.conftest import on_tty, shipway

NEVER_READY = """
[app]
name = "slow"
[processes.web]
command = ["python3", "-c", "import time; time.sleep(600)"]
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "1s"
attempts = 12
"""


def run_with(slot: Slot, env: dict[str, str], *args: str) -> Result:
    return replace(slot, env={**slot.env, **env}).run(*args)


def never_ready(tmp_path: Path, local_app: Callable[[Path], Slot]) -> Slot:
    app = tmp_path / "slow"
    app.mkdir()
    (app / "shipway.toml").write_text(NEVER_READY)
    return local_app(app)


def test_on_a_terminal_progress_is_live_and_coloured(hello: Slot) -> None:
    code, out, _ = on_tty(shipway("-f", str(hello.spec), "deploy"), hello.env, hello.app_dir)
    assert code == 0, out
    assert "\x1b[?25l" in out  # the live view (rich) hides the cursor while it redraws
    assert "\x1b[32mrolled hello/local from nothing to r1" in out  # the outcome, in green
    text = plain(out)
    # each wait's last state stays as a line once it is over, with how long it took
    assert re.search(r"  web: ready 1 of 1 \(\d+\.\d+s\)", text), text
    assert re.search(r"  worker: ready 1 of 1 \(\d+\.\d+s\)", text), text


def test_no_color_on_a_terminal_and_piped_output_are_plain_lines(hello: Slot) -> None:
    env = {**hello.env, "NO_COLOR": "1"}
    code, out, _ = on_tty(shipway("-f", str(hello.spec), "deploy"), env, hello.app_dir)
    assert code == 0, out
    assert "\x1b" not in out  # no colour, no redrawing
    assert "  web: ready 1 of 1\r\n" in out
    hello.edit_spec('GREETING = "hello"', 'GREETING = "hi"')
    piped = hello.run("deploy")
    assert piped.code == 0, piped.text
    assert "\x1b" not in piped.text
    assert "  web: ready 1 of 1\n" in piped.out


def waited(text: str) -> list[int]:
    """The seconds of every '(waiting Ns)' line of web's wait, in order."""
    lines = [line for line in text.splitlines() if "web: ready 0 of 1" in line]
    assert all("connection refused" in line for line in lines[1:]), lines  # the last probe
    return [int(m.group(1)) for line in lines if (m := re.search(r"\(waiting (\d+)s\)", line))]


def test_a_piped_wait_prints_what_it_waits_for_at_least_every_5s(
    tmp_path: Path, local_app: Callable[[Path], Slot]
) -> None:
    slot = never_ready(tmp_path, local_app)
    result = slot.run("deploy")
    assert result.code == 12, result.text  # no-anchor: it never became ready
    seconds = waited(result.out)
    # nothing changes for 12 s, yet the wait is said again and again, never 5 s apart more
    assert len(seconds) >= 2 and seconds[-1] >= 9, result.out
    assert all(b - a <= 6 for a, b in zip([0, *seconds], seconds, strict=False)), seconds


def test_a_wait_on_a_terminal_shows_its_time_live(
    tmp_path: Path, local_app: Callable[[Path], Slot]
) -> None:
    slot = never_ready(tmp_path, local_app)
    code, out, _ = on_tty(shipway("-f", str(slot.spec), "deploy"), slot.env, slot.app_dir)
    assert code == 12, out
    shown = sorted(
        {int(s) for s in re.findall(r"ready 0 of 1 — [^\r\n]*?connection refused[^\r\n]*?  (\d+)s",
                                    plain(out))}
    )  # fmt: skip
    assert shown and shown[-1] >= 9, plain(out)
    assert all(b - a <= 5 for a, b in itertools.pairwise(shown)), shown


def test_history_fits_the_width_and_wide_shows_everything(hello: Slot) -> None:
    assert hello.run("deploy").code == 0
    hello.edit_spec('GREETING = "hello"', 'GREETING = "hi"')
    assert hello.run("deploy").code == 0
    narrow = run_with(hello, {"COLUMNS": "80"}, "history")
    assert narrow.code == 0, narrow.text
    lines = narrow.out.splitlines()
    assert len(lines) == 3 and all(len(line) <= 80 for line in lines), lines
    assert re.search(r"sha256:[0-9a-f]{12}\b", narrow.out)  # short digests
    assert not re.search(r"[0-9a-f]{64}", narrow.out)
    wide = run_with(hello, {"COLUMNS": "80"}, "history", "--wide")
    assert re.search(r"sha256:[0-9a-f]{64}", wide.out)
    assert "ACTOR" in wide.out and max(len(line) for line in wide.out.splitlines()) > 80
