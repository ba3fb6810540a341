"""The engine under engine faults (the in-memory backend, made to fail where a test says):
a record that cannot be written never stops a rollback nor turns a good rollout into a
failure, the next operation repairs what the records lag behind, and an undo stopped by an
engine error is read again and tried again before anyone is told the slot may be down.
The same cases on the real engines: tests/backends/*/test_faults.py."""

from __future__ import annotations

from collections.abc import Callable

from shipway.backends.memory import MemoryBackend
from shipway.engine import RollbackFailed, Rolled, RolledBack
from shipway.errors import BackendError
from shipway.spec import App
from tests.engine.test_sequencing import Lines, deploy, statuses


def failing_writes(backend: MemoryBackend, needle: str) -> None:
    """Every record write that includes ``needle`` (``r2:failed``) fails."""

    def hook() -> None:
        _, detail = backend.calls[-1]
        if needle in detail:
            raise BackendError(f"writing the release records: 503 ({detail})")

    backend.on_call["write_records"] = hook


def failing_applies(backend: MemoryBackend, after: int, times: int | None) -> Callable[[], int]:
    """Applies after the first ``after`` fail, ``times`` of them (None: all); returns how
    many failed so far."""
    seen = {"applies": 0, "failed": 0}

    def hook() -> None:
        seen["applies"] += 1
        if seen["applies"] > after and (times is None or seen["failed"] < times):
            seen["failed"] += 1
            raise BackendError("applying: 503 ServiceUnavailable (after 6 attempts in 8.0s)")

    backend.on_call["apply"] = hook
    return lambda: seen["failed"]


def test_a_bad_rollout_whose_failed_record_cannot_be_written_is_still_rolled_back(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    anchor = {k: v.unit.digest for k, v in backend.live.items()}
    backend.doomed_images.add("reg/shop:2")
    failing_writes(backend, "r2:failed")
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, RolledBack) and outcome.records_behind, outcome
    assert any("r2 is pending (r1 is serving)" in w for w in outcome.warnings)
    assert {k: v.unit.digest for k, v in backend.live.items()} == anchor  # r1 is back
    assert statuses(backend) == {1: "deployed", 2: "pending"}
    assert any("could not record r2 as failed" in line for line in out.lines)

    del backend.on_call["write_records"]
    assert isinstance(deploy(app, backend, out, image="reg/shop:3"), Rolled)
    assert statuses(backend) == {1: "superseded", 2: "failed", 3: "deployed"}


def test_a_good_rollout_whose_record_cannot_be_written_is_rolled_and_repaired_next(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    failing_writes(backend, "r2:deployed")
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, Rolled) and outcome.exit_code == 0 and outcome.records_behind
    assert any("r2 is serving, but its record could not be written" in w for w in outcome.warnings)
    assert outcome.to_json()["records_behind"] is True
    assert statuses(backend) == {1: "deployed", 2: "pending"}

    del backend.on_call["write_records"]
    out.lines.clear()
    backend.calls.clear()
    outcome = deploy(app, backend, out, image="reg/shop:3")
    assert isinstance(outcome, Rolled) and outcome.from_revision == 2
    assert any("r2 is what runs, whole and ready: recorded as deployed" in x for x in out.lines)
    assert not any("re-asserting" in line for line in out.lines)
    assert statuses(backend) == {1: "superseded", 2: "superseded", 3: "deployed"}


def test_a_pending_release_that_runs_whole_but_is_not_ready_is_undone(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    failing_writes(backend, "r2:deployed")
    assert deploy(app, backend, out, image="reg/shop:2").records_behind
    del backend.on_call["write_records"]
    backend.doomed_images.add("reg/shop:2")  # it stopped being ready since
    out.lines.clear()
    outcome = deploy(app, backend, out, image="reg/shop:3")
    assert isinstance(outcome, Rolled), outcome
    assert any("r2 runs whole but is not ready" in line for line in out.lines)
    assert any("re-asserting r1" in line for line in out.lines)
    assert statuses(backend) == {1: "superseded", 2: "failed", 3: "deployed"}


def test_an_undo_stopped_by_an_engine_error_is_read_again_and_walked_again(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    anchor = {k: v.unit.digest for k, v in backend.live.items()}
    backend.doomed_images.add("reg/shop:2")
    # r2 applies its two workloads; the undo's first apply fails
    failed = failing_applies(backend, after=2, times=1)
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert failed() == 1
    assert isinstance(outcome, RolledBack), outcome
    assert any("trying once more (attempt 2 of 3)" in line for line in out.lines), out.lines
    assert {k: v.unit.digest for k, v in backend.live.items()} == anchor
    # the second attempt verified what it put back: a wait for every waiting unit
    undo_waits = [d for n, d in backend.calls if n == "wait"]
    assert {"web", "worker"} <= set(undo_waits)


def test_an_undo_that_keeps_failing_is_rollback_failed_after_its_attempts(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    backend.doomed_images.add("reg/shop:2")
    failing_applies(backend, after=2, times=None)
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, RollbackFailed) and outcome.exit_code == 11, outcome
    assert sum("trying once more" in line for line in out.lines) == 2  # 3 attempts in all
