"""The one event stream (events/): every operation that starts emits ``started`` (who,
what, where), ``planned``, its steps, and exactly one ``ended`` — its outcome, or the error
that stopped it — and a plain line reporter still sees exactly the lines it saw before."""

from __future__ import annotations

import signal

import pytest

from shipway.backends.memory import MemoryBackend
from shipway.engine import Engine, Interrupted
from shipway.engine.request import DeployRequest
from shipway.errors import BuildFailed
from shipway.events.model import Ended, Event, Planned, Started, StepBegun
from shipway.events.sink import Recorded
from shipway.guard import Guard, breaking_glass
from shipway.spec import App
from tests.engine.test_sequencing import ENV, Lines


def run(
    app: App, backend: MemoryBackend, image: str = "reg/shop:1", slot: str = "test1", **kw: object
) -> tuple[object, list[Event]]:
    sink = Recorded()
    clearance = Guard(app.slots).clear(slot, confirm=slot if slot == "prod" else None)
    engine = Engine(backend, sink, actor="tester@test", environ=ENV)
    outcome = engine.deploy(clearance, app, slot, DeployRequest(image=image, **kw))  # type: ignore[arg-type]
    return outcome, sink.events


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events if e.kind in ("started", "planned", "ended")]


def test_a_deploy_tells_started_planned_each_step_and_one_outcome(
    app: App, backend: MemoryBackend
) -> None:
    outcome, events = run(app, backend)
    assert kinds(events) == ["started", "planned", "ended"]
    started = next(e for e in events if isinstance(e, Started))
    assert (started.operation, started.app, started.slot) == ("deploy", "shop", "test1")
    assert started.who.user and started.who.host
    steps = [e for e in events if isinstance(e, StepBegun)]
    assert steps and [s.index for s in steps] == list(range(1, steps[0].total + 1))
    ended = events[-1]
    assert isinstance(ended, Ended)
    assert (ended.outcome, ended.exit_code, ended.line) == ("rolled", 0, outcome.line())  # type: ignore[attr-defined]
    assert ended.data == outcome.to_json()  # type: ignore[attr-defined]
    # its JSON form is what a dashboard or a webhook reads
    assert [e.to_json()["event"] for e in events][:2] == ["started", "planned"]


def test_a_failed_deploy_ends_once_with_its_rollback(app: App, backend: MemoryBackend) -> None:
    run(app, backend)
    backend.doomed_images.add("reg/shop:bad")
    _, events = run(app, backend, image="reg/shop:bad")
    ended = [e for e in events if isinstance(e, Ended)]
    assert len(ended) == 1 and ended[0].outcome == "rolled-back" and ended[0].exit_code == 10
    phases = {s.fields()["phase"] for s in events if isinstance(s, StepBegun)}
    assert phases == {"rollout", "rollback to r1"}


def test_no_changes_is_an_outcome_too(app: App, backend: MemoryBackend) -> None:
    run(app, backend)
    _, events = run(app, backend)
    assert kinds(events) == ["started", "ended"]
    assert events[-1].outcome == "unchanged"  # type: ignore[attr-defined]


def test_an_interrupted_deploy_ends_with_an_error_event(app: App, backend: MemoryBackend) -> None:
    run(app, backend)

    def interrupt() -> None:
        raise Interrupted(signal.SIGTERM)

    sink = Recorded()
    backend.on_call["apply"] = interrupt
    clearance = Guard(app.slots).clear("test1")
    with pytest.raises(Interrupted):
        Engine(backend, sink, environ=ENV).deploy(
            clearance, app, "test1", DeployRequest(image="reg/shop:3")
        )
    ended = [e for e in sink.events if isinstance(e, Ended)]
    assert len(ended) == 1
    assert (ended[0].outcome, ended[0].exit_code) == ("error", 143)
    assert "interrupted by SIGTERM" in ended[0].line


def test_a_line_reporter_sees_the_lines_it_saw_before(app: App, backend: MemoryBackend) -> None:
    out = Lines()
    clearance = Guard(app.slots).clear("test1")
    Engine(backend, out, environ=ENV).deploy(
        clearance, app, "test1", DeployRequest(image="reg/shop:1")
    )
    assert out.lines[0].startswith("deploy shop to slot test1")  # the plan, as before
    assert any(line.startswith("[1/") for line in out.lines)
    assert not any("started" in line for line in out.lines)


def test_the_audit_is_recorded_with_the_clearance_used(app: App, backend: MemoryBackend) -> None:
    run(app, backend, image="reg/shop:2", slot="prod")
    prod = backend.records[1]
    assert prod.audit is not None and prod.audit.clearance == ("confirm",)
    assert prod.audit.summary == "first release" and prod.audit.operation == "deploy"
    assert prod.actor == "tester@test"  # the engine's actor stays the record's actor


def test_break_glass_is_in_the_clearance_and_the_started_event(
    app: App, backend: MemoryBackend
) -> None:
    from shipway.spec.freeze import Freeze

    frozen = Freeze("incident 7", "2999-01-01T00:00:00+00:00", by="ops@desk")
    with breaking_glass("hotfix for incident 7"):
        clearance = Guard(app.slots).clear("test1", kept=lambda: [frozen])
    assert clearance.break_glass == "hotfix for incident 7"
    sink = Recorded()
    Engine(backend, sink, environ=ENV).deploy(
        clearance, app, "test1", DeployRequest(image="reg/shop:1")
    )
    started = next(e for e in sink.events if isinstance(e, Started))
    assert started.who.clearance == ("break-glass",)
    assert started.who.break_glass == "hotfix for incident 7"
    record = backend.records[1]
    assert record.audit is not None and record.audit.break_glass == "hotfix for incident 7"


def test_planned_carries_the_change_summary(app: App, backend: MemoryBackend) -> None:
    run(app, backend)
    _, events = run(app, backend, image="reg/shop:2")
    planned = next(e for e in events if isinstance(e, Planned))
    assert planned.revision == 2 and "image" in planned.summary


def test_an_operation_that_died_is_told_by_the_run_that_recovers_it(
    app: App, backend: MemoryBackend
) -> None:
    from dataclasses import replace

    from shipway.events.model import Recovered
    from shipway.release.audit import Audit

    run(app, backend)
    # a deploy died half-way: r2 left pending, with who started it
    plan = Engine(backend, Recorded(), environ=ENV).plan_deploy(
        app, "test1", DeployRequest(image="reg/shop:2")
    )
    assert plan.release is not None
    backend.records[2] = replace(plan.release, audit=Audit("bob", "laptop"))
    _, events = run(app, backend, image="reg/shop:3")
    assert [e.kind for e in events if e.kind in ("started", "recovered", "ended")] == [
        "started",
        "recovered",
        "ended",
    ]
    told = next(e for e in events if isinstance(e, Recovered))
    assert (told.revision, told.result) == (2, "failed")
    assert told.who is not None and told.who.user == "bob"


def test_an_operation_without_a_release_is_told_once_done_or_stopped(
    app: App, backend: MemoryBackend
) -> None:
    """stop, build …: ``started`` then exactly one ``ended`` — ``done``, or ``error`` when
    it fails after it started (the same telling as a deploy's: engine/telling.py)."""
    run(app, backend)
    sink = Recorded()
    engine = Engine(backend, sink, actor="tester@test", environ=ENV)
    clearance = Guard(app.slots).clear("test1")
    with breaking_glass("not frozen: recorded nowhere"):
        engine.stop(clearance, app, "test1")
    assert kinds(sink.events) == ["started", "ended"]
    started, ended = sink.of(Started)[0], sink.of(Ended)[0]
    assert isinstance(started, Started) and isinstance(ended, Ended)
    assert started.operation == "stop" and started.who.break_glass is None
    assert (ended.outcome, ended.exit_code, ended.operation) == ("done", 0, "stop")
    assert ended.data["stopped"] == "shop/test1" and backend.live == {}

    backend.build_source = "FROM scratch"
    backend.failing_build_log = ("step 2/3: RUN make", "make: *** failed")
    sink.events.clear()
    with pytest.raises(BuildFailed):
        engine.build_only(clearance, app, "test1")
    assert kinds(sink.events) == ["started", "ended"]
    (ended,) = sink.of(Ended)
    assert isinstance(ended, Ended) and ended.outcome == "error" and ended.operation == "build"
    assert ended.exit_code == BuildFailed.exit_code and "build shop/test1 stopped" in ended.line
