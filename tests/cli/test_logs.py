"""``shipway logs``: every process interleaved by the time each line was written, prefixed
and coloured per process, ``--timestamps``, ``--since``, ``-n``, ``--release N`` (a failed
release's too), and after ``stop`` a line saying what it shows."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

from tests.backends.local.conftest import Slot, eventually
from tests.cli.conftest import on_tty, shipway

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d ")


def view(slot: Slot, *args: str) -> dict[str, Any]:
    return dict(slot.json("logs", *args))


def at(line: dict[str, Any]) -> float:
    return datetime.fromisoformat(line["at"]).timestamp()


def test_logs_interleave_processes_by_time_with_timestamps_and_counts(hello: Slot) -> None:
    hello.deploy()
    eventually(lambda: "heartbeat 1" in hello.run("logs", "worker").out, what="2 heartbeats")
    hello.get("/first")
    lines = view(hello, "-n", "100")["lines"]
    assert {line["process"] for line in lines} == {"web", "worker"}
    times = [at(line) for line in lines]
    assert times == sorted(times)  # one stream, in the order the lines were written
    assert next(line["source"] for line in lines if line["process"] == "web") == "web.1@r1"

    three = hello.run("logs", "-n", "3")
    assert len(three.out.splitlines()) == 3  # -n counts all processes together
    stamped = hello.run("logs", "--timestamps", "-n", "5").out.splitlines()
    assert len(stamped) == 5 and all(STAMP.match(line) for line in stamped), stamped
    # the prefix of every line is padded to one width: the text starts in one column
    assert len({line.index("| ") for line in stamped}) == 1, stamped

    mark = time.time()
    eventually(lambda: time.time() > mark + 0.01, what="the clock to move on")
    hello.get("/after-the-mark")
    since = datetime.fromtimestamp(mark).astimezone().isoformat()
    recent = view(hello, "--since", since)["lines"]
    assert any("/after-the-mark" in line["text"] for line in recent)
    assert all(at(line) >= mark for line in recent)
    assert not any("/first" in line["text"] for line in recent)
    assert any("/first" in line["text"] for line in view(hello, "--since", "10m")["lines"])
    bad = hello.run("logs", "--since", "yesterday")
    assert bad.code == 2 and "--since 'yesterday' is neither a duration nor a time" in bad.err


def test_logs_of_a_failed_release_and_after_stop(hello: Slot) -> None:
    hello.deploy()
    failing = hello.app_dir / "shipway-failing.toml"
    assert hello.run("deploy", spec=failing).code == 10  # r2 failed, r1 serves

    now = view(hello)
    assert now["about"] is None  # what runs: r1
    assert {line["source"] for line in now["lines"]} <= {"web.1@r1", "worker.1@r1"}

    failed = hello.run("logs", "--release", "2", "web")
    assert failed.code == 0, failed.text
    assert "-- the logs of r2 (failed, nothing of it runs) --" in failed.err
    assert '"GET /up HTTP/1.1" 500' in failed.out  # the failed release's own instance
    assert all(line.startswith("web.1@r2 | ") for line in failed.out.splitlines())

    assert hello.run("stop").code == 0
    stopped = hello.run("logs")
    assert stopped.code == 0, stopped.text
    assert (
        "-- nothing runs in hello/local (stopped): the last logs of r1, the deployed release --"
        in stopped.err
    )
    sources = {line.split(" | ")[0].strip() for line in stopped.out.splitlines()}
    assert sources == {"web.1@r1", "worker.1@r1"}  # never the failed r2's log in silence
    missing = hello.run("logs", "--release", "7")
    assert missing.code == 2 and "no release r7 in hello/local (releases: r1, r2" in missing.err


def test_each_process_has_its_colour_on_a_terminal(hello: Slot) -> None:
    hello.deploy()
    eventually(lambda: "heartbeat" in hello.run("logs", "worker").out, what="a heartbeat")
    code, out, _ = on_tty(shipway("-f", str(hello.spec), "logs"), hello.env, hello.app_dir)
    assert code == 0, out
    assert "\x1b[36mweb.1@r1    |" in out  # web: cyan
    assert "\x1b[33mworker.1@r1 |" in out  # worker: yellow
    plain = hello.run("logs")
    assert "\x1b" not in plain.out
