"""Every operation's events kept on this machine while it runs (events/live.py): one file
per operation, made at its ``started`` (0600, in a 0700 directory), written as it goes,
pruned when one ends — finished files beyond a count or an age go, a running one never —
and never a reason for an operation to fail."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

from shipway.backends.memory import MemoryBackend
from shipway.engine import Engine
from shipway.engine.request import DeployRequest
from shipway.events.live import LiveFile, OpFile, default_state_dir, live_dir, op_files, prune
from shipway.events.model import CanaryFigures, Ended, Said, Started
from shipway.events.sink import Fanout, Recorded
from shipway.guard import Guard
from shipway.release.audit import Audit
from shipway.spec import App
from tests.engine.test_sequencing import ENV


def deploy(app: App, backend: MemoryBackend, sink: object, image: str = "reg/shop:1") -> None:
    clearance = Guard(app.slots).clear("test1")
    engine = Engine(backend, sink, actor="tester@test", environ=ENV)
    engine.deploy(clearance, app, "test1", DeployRequest(image=image))


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def dead_pid() -> int:
    """The pid of a process that has ended."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_each_operation_gets_a_file_of_its_own_written_as_it_goes(
    app: App, backend: MemoryBackend, tmp_path: Path
) -> None:
    where = tmp_path / "state" / "_events"
    live = LiveFile(where)
    recorded = Recorded()
    deploy(app, backend, Fanout(live, recorded))
    deploy(app, backend, live, image="reg/shop:2")

    files = op_files(where)
    assert len(files) == 2
    first, second = files
    assert (first.app, first.slot, first.pid) == ("shop", "test1", os.getpid())
    assert first.op.startswith("shop.test1.") and first.op.endswith(f".{os.getpid()}-1")
    assert second.op.endswith(f".{os.getpid()}-2")
    # the file holds the operation's stream, exactly: started first, ended last
    written = lines(first.path)
    assert written == [e.to_json() for e in recorded.events]
    assert written[0]["event"] == "started" and written[-1]["event"] == "ended"
    assert first.ended() and first.over() and second.ended()
    # only its owner reads it
    assert stat.S_IMODE(first.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(where.stat().st_mode) == 0o700


def test_lines_said_before_started_are_written_first(tmp_path: Path) -> None:
    live = LiveFile(tmp_path)
    live.emit(Said("recovering: r2 was left pending"))
    live.emit(Started("deploy", "shop", "prod", "local", Audit("tester", "box")))
    live.emit(Said("[1/1] something"))
    (f,) = op_files(tmp_path)
    assert [e["event"] for e in lines(f.path)] == ["said", "started", "said"]
    assert not f.ended() and not f.over()  # its writer (this process) runs: running


def test_a_state_directory_that_cannot_be_written_never_fails_the_operation(
    app: App, backend: MemoryBackend, tmp_path: Path
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    recorded = Recorded()
    deploy(app, backend, Fanout(LiveFile(blocked / "_events"), recorded))
    assert isinstance(recorded.events[-1], Ended) and recorded.events[-1].outcome == "rolled"


def write_op(where: Path, name: str, pid: int, *, ended: bool, age: float = 0.0) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"shop.test1.{name}.{pid}-1.jsonl"
    events = [Started("deploy", "shop", "test1", "local", Audit("tester", "box"))]
    if ended:
        events.append(Ended("rolled", 0, "rolled"))
    path.write_text("".join(json.dumps(e.to_json()) + "\n" for e in events))
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))
    return path


def test_finished_files_are_pruned_by_count_and_age_and_a_running_one_never(
    tmp_path: Path,
) -> None:
    gone_pid = dead_pid()
    finished = [
        write_op(tmp_path, f"20260101T0000{i:02d}000000", gone_pid, ended=True) for i in range(6)
    ]
    killed = write_op(tmp_path, "20260101T000010000000", gone_pid, ended=False)  # no ended
    now = time.strftime("%Y%m%dT%H%M%S000000", time.gmtime())
    running = write_op(tmp_path, now, os.getpid(), ended=False, age=9e6)
    old = write_op(tmp_path, "20260101T000020000000", gone_pid, ended=True, age=7200)

    deleted = prune(tmp_path, keep=4, keep_for=3600)

    left = {f.path for f in op_files(tmp_path)}
    assert running in left, "a running operation's file was deleted"
    assert old not in left  # older than keep_for, though among the newest
    # of the newest four finished ones (the killed one counts as finished), the three
    # younger than keep_for are kept
    assert left - {running} == {killed, *finished[4:]}
    assert set(deleted) == {old, *finished[:4]}
    assert prune(tmp_path, keep=4, keep_for=3600) == []


def test_a_pid_reused_by_a_later_process_is_not_the_writer(tmp_path: Path) -> None:
    """A deploy killed -9 whose pid a later process got: its file is over, not running."""
    f = OpFile.parse(write_op(tmp_path, "20000101T000000000000", os.getpid(), ended=False))
    assert f is not None and not f.writer_alive() and f.over()
    assert prune(tmp_path, keep=0) == [f.path]


def test_an_operation_that_ends_prunes_what_is_over(
    app: App, backend: MemoryBackend, tmp_path: Path
) -> None:
    gone_pid = dead_pid()
    for i in range(60):
        write_op(tmp_path, f"20250101T0000{i:02d}000000", gone_pid, ended=True)
    deploy(app, backend, LiveFile(tmp_path))
    files = op_files(tmp_path)
    assert len(files) == 50  # KEEP_FINISHED, the new one among them
    assert files[-1].pid == os.getpid()


def test_the_file_names_are_read_back_and_other_names_ignored(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "a.b.jsonl").write_text("x")
    path = write_op(tmp_path, "20260101T000000000000", 4242, ended=True)
    assert op_files(tmp_path) == [OpFile(path, "shop", "test1", "20260101T000000000000", 4242)]


def test_this_machines_state_directory() -> None:
    assert default_state_dir({"SHIPWAY_STATE_DIR": "/srv/sw"}) == Path("/srv/sw")
    assert default_state_dir({"XDG_STATE_HOME": "/x"}) == Path("/x/shipway")
    assert live_dir(Path("/srv/sw")) == Path("/srv/sw/_events")


def test_the_canary_event_carries_its_figures() -> None:
    counts = {"requests": 40, "bad": 1, "5xx": 1, "failures": 0, "p99_ms": 12.5}
    e = CanaryFigures(
        "shop", "prod", 3, 1, (10, 50, 100), 10, "hold", "too few requests", 2.25, counts, counts
    )
    doc = e.to_json()
    assert doc["event"] == "canary" and e.lines() == []  # the terminal is told in words
    assert {k: doc[k] for k in ("app", "slot", "revision", "step", "steps", "percent")} == {
        "app": "shop", "slot": "prod", "revision": 3, "step": 1, "steps": [10, 50, 100],
        "percent": 10,
    }  # fmt: skip
    assert doc["canary"] == counts and doc["verdict"] == "hold" and doc["final"] is False
