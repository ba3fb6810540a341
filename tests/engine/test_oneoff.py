"""One-off commands and the data-loss warning, sequenced against the in-memory backend:
the clearance before anything, the deployed release as the environment, the command's
exit code returned; a deploy warns about what the anchor wrote inside itself."""

from __future__ import annotations

import pytest

from shipway import api
from shipway.backends.memory import MemoryBackend
from shipway.engine import Rolled, RolledBack
from shipway.errors import ClearanceError, GuardRefused, InputError
from shipway.guard import Guard
from shipway.spec import App
from tests.engine.test_sequencing import ENV, Lines, deploy, engine


def run(app: App, backend: MemoryBackend, out: Lines, slot: str = "test1", **kw: object) -> int:
    clearance = Guard(app.slots).clear(slot, confirm=slot if slot == "prod" else None)
    return engine(backend, out).run_command(clearance, app, slot, **kw)  # type: ignore[arg-type]


def test_run_returns_the_commands_code_in_the_deployed_release(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    deploy(app, backend, out, image="reg/shop:2")
    backend.calls.clear()
    backend.command_exit_code = 7
    assert run(app, backend, out, command=["rake", "db:seed"]) == 7
    assert [c for c in backend.calls if c[0] == "run_command"] == [
        ("run_command", "r2 web: rake db:seed")  # the deployed one; web by default
    ]
    assert not [c for c in backend.calls if c[0] in ("lock", "write_records", "apply")]
    assert run(app, backend, out, command=["work", "--once"], process="worker") == 7
    assert backend.calls[-1] == ("run_command", "r2 worker: work --once")


def test_run_is_refused_before_anything_is_read(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    backend.calls.clear()
    with pytest.raises(GuardRefused):
        api.run(app, "prod", ["sh"], backend=backend, reporter=out)
    elsewhere = Guard(app.slots).clear("test1")
    with pytest.raises(ClearanceError):
        engine(backend, out).run_command(elsewhere, app, "prod", ["sh"])
    assert backend.calls == []


def test_run_says_what_is_missing(app: App, backend: MemoryBackend, out: Lines) -> None:
    with pytest.raises(InputError, match="nothing is deployed in slot 'test1'"):
        run(app, backend, out, command=["sh"])
    deploy(app, backend, out)
    with pytest.raises(InputError, match=r"--process 'nosuch'.*processes: web, worker"):
        run(app, backend, out, command=["sh"], process="nosuch")
    with pytest.raises(InputError, match="nothing to run"):
        run(app, backend, out, command=[])


def test_runs_line_masks_a_secret_typed_into_the_command(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    run(app, backend, out, command=["echo", ENV["SHOP_TOKEN"]])
    said = [line for line in out.lines if line.startswith("running echo")]
    assert said and ENV["SHOP_TOKEN"] not in said[0]


def test_a_deploy_warns_about_files_the_anchor_wrote_inside_itself(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    backend.runtime_files_of[1] = ["db.sqlite3", *(f"media/{n}.png" for n in range(12))]
    backend.calls.clear()
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, Rolled)
    [warning] = outcome.warnings
    assert warning.startswith("r1 wrote 13 file(s) at run time inside its own copy of the app")
    assert "db.sqlite3, media/0.png" in warning and "and 3 more" in warning
    assert "(db.sqlite3: a database)" in warning
    # a volume is a directory, never the database file itself (that volume would fail)
    assert 'declare a directory volume, [volumes.data] path = "data"' in warning
    assert 'DATABASES["default"]["NAME"] = BASE_DIR / "data" / "db.sqlite3"' in warning
    # read before anything replaced the anchor
    names = [n for n, _ in backend.calls]
    assert names.index("runtime_files") < names.index("apply")


def test_what_the_anchor_wrote_is_read_while_the_slot_is_observed(
    app: App, backend: MemoryBackend, out: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read runs beside the observation (a barrier of two that a read after it never
    passes), and is still done before the first step."""
    import threading

    deploy(app, backend, out)
    backend.runtime_files_of[1] = ["db.sqlite3"]
    both = threading.Barrier(2, timeout=10)
    observe, runtime_files = backend.observe, backend.runtime_files

    def observing(*args: object) -> object:
        both.wait()
        return observe(*args)  # type: ignore[arg-type]

    def reading(*args: object) -> object:
        both.wait()
        return runtime_files(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "observe", observing)
    monkeypatch.setattr(backend, "runtime_files", reading)
    backend.calls.clear()
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, Rolled)
    assert [w for w in outcome.warnings if "r1 wrote 1 file(s) at run time" in w]
    names = [n for n, _ in backend.calls]
    assert names.index("runtime_files") < names.index("apply")


def test_no_warning_when_the_deploy_fails_or_nothing_was_written(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, Rolled) and outcome.warnings == ()
    backend.runtime_files_of[2] = ["db.sqlite3"]
    backend.failing_release_command = True
    failed = deploy(app, backend, out, image="reg/shop:3")
    assert isinstance(failed, RolledBack) and not any("at run time" in w for w in failed.warnings)
