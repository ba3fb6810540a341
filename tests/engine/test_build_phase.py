"""The build phase, sequenced by the engine against the in-memory backend: it runs first,
before anything new starts; the built digest (not the tag) is what the units apply; a
failed build is a failed release in which nothing new started; the same inputs are never
built twice; an explicit image (a promotion) is never rebuilt."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shipway.backends.memory import MemoryBackend
from shipway.engine import Engine, NoAnchor, Rolled, RolledBack, Unchanged
from shipway.engine.request import DeployRequest
from shipway.errors import InputError
from shipway.guard import Guard
from shipway.plan import Build, Plan
from shipway.release import codec
from shipway.release.model import ImageMeta
from shipway.spec import App
from tests.conftest import app_from_toml
from tests.engine.test_sequencing import ENV, SPEC, Lines

APPLIES = {"apply", "remove", "run_release_command", "scale", "point_host"}


@pytest.fixture
def app() -> App:
    return app_from_toml(SPEC)


@pytest.fixture
def backend() -> MemoryBackend:
    b = MemoryBackend()
    b.build_source = "print('v1')"
    return b


def deploy(app: App, backend: MemoryBackend, out: Lines, **kw: Any) -> Any:
    clearance = Guard(app.slots).clear("test1")
    engine = Engine(backend, out, actor="tester@test", environ=ENV)
    return engine.deploy(clearance, app, "test1", DeployRequest(build=True, **kw))


def names(backend: MemoryBackend) -> list[str]:
    return [name for name, _ in backend.calls]


def test_the_build_runs_first_and_the_units_run_the_pushed_digest(
    app: App, backend: MemoryBackend
) -> None:
    out = Lines()
    outcome = deploy(app, backend, out)
    assert isinstance(outcome, Rolled)
    calls = names(backend)
    assert calls.index("build") < min(calls.index(n) for n in APPLIES if n in calls)
    digest = next(iter(backend.built.values()))
    web = backend.live["workload/web"].unit.body
    assert web["digest"] == digest and str(web["image"]).startswith("reg/shop:src-")
    record = backend.records[1]
    assert record.digest == digest and record.image_ref() == f"reg/shop@{digest}"
    assert record.image_meta == ImageMeta("dockerfile", "/app", 8000)
    assert record.build is not None and not record.build.reused
    assert record.build.inputs.startswith("sha256:") and record.build.result == digest
    # the record as stored reads back whole, build included
    assert codec.decode(codec.encode(record)).build == record.build
    assert any(line.startswith("  1. build image reg/shop:src-") for line in out.lines)


def test_the_same_inputs_are_not_built_again(app: App, backend: MemoryBackend) -> None:
    deploy(app, backend, Lines())
    built_before = dict(backend.built)
    out = Lines()
    clearance = Guard(app.slots).clear("test1")
    # nothing differs: "no changes" — nothing built, nothing applied, no revision
    plan = Engine(backend, out, environ=ENV).plan_deploy(app, "test1", DeployRequest(build=True))
    assert plan.unchanged and not any(isinstance(s, Build) for s in plan.steps)
    outcome = Engine(backend, out, environ=ENV).deploy(
        clearance, app, "test1", DeployRequest(build=True)
    )
    assert isinstance(outcome, Unchanged) and set(backend.records) == {1}
    assert "build" not in [n for n, _ in backend.calls[-12:]]
    # forced: a new revision, and the build step reuses what was built
    plan = Engine(backend, out, environ=ENV).plan_deploy(
        app, "test1", DeployRequest(build=True, force=True)
    )
    first = plan.steps[0]
    assert isinstance(first, Build) and first.reuse
    assert first.describe().startswith("reuse image reg/shop:src-")
    # reused: the plan already renders by digest, with the metadata of the built image
    assert plan.release is not None and plan.release.digest == next(iter(built_before.values()))
    outcome = Engine(backend, out, environ=ENV).deploy(
        clearance, app, "test1", DeployRequest(build=True, force=True)
    )
    assert isinstance(outcome, Rolled)
    assert backend.built == built_before
    record = backend.records[2]
    assert record.build is not None and record.build.reused


def test_a_changed_source_is_built_anew(app: App, backend: MemoryBackend) -> None:
    deploy(app, backend, Lines())
    backend.build_source = "print('v2')"
    deploy(app, backend, Lines())
    assert len(backend.built) == 2
    assert backend.records[1].digest != backend.records[2].digest


def test_a_failed_build_rolls_back_having_started_nothing(app: App, backend: MemoryBackend) -> None:
    assert isinstance(deploy(app, backend, Lines()), Rolled)
    live_before = {k: v.unit.digest for k, v in backend.live.items()}
    backend.build_source = "print('v2')"
    backend.failing_build_log = ("Step 3/4 : RUN pip install", f"token {ENV['SHOP_TOKEN']}", "E!")
    backend.calls.clear()
    out = Lines()
    outcome = deploy(app, backend, out)
    assert isinstance(outcome, RolledBack) and outcome.exit_code == 10
    assert outcome.failure.reason == "BuildFailed"
    assert "RUN step failed" in outcome.failure.message
    assert "Step 3/4 : RUN pip install" in outcome.failure.details
    text = json.dumps(outcome.to_json()) + "\n".join(out.lines)
    assert ENV["SHOP_TOKEN"] not in text and "token ***" in text
    assert "  build | token ***" in out.lines  # what the build streamed is masked too
    assert not [c for c in names(backend) if c in APPLIES]  # nothing new started
    assert {k: v.unit.digest for k, v in backend.live.items()} == live_before
    assert str(backend.records[2].status) == "failed"
    assert str(backend.records[1].status) == "deployed"


def test_a_failed_first_build_is_no_anchor(app: App, backend: MemoryBackend) -> None:
    backend.failing_build_log = ("boom",)
    outcome = deploy(app, backend, Lines())
    assert isinstance(outcome, NoAnchor) and outcome.exit_code == 12
    assert outcome.failure.details == ("boom",)
    assert not backend.live and not [c for c in names(backend) if c in APPLIES]


def test_an_explicit_image_is_never_built(app: App, backend: MemoryBackend) -> None:
    with pytest.raises(InputError, match="takes no --image"):
        deploy(app, backend, Lines(), image="reg/shop:1")
    clearance = Guard(app.slots).clear("test1")
    outcome = Engine(backend, Lines(), environ=ENV).deploy(
        clearance,
        app,
        "test1",
        DeployRequest(image="reg/shop@sha256:" + "1" * 64, operation="promote"),
    )
    assert isinstance(outcome, Rolled)
    assert "build" not in names(backend) and backend.records[1].build is None


def test_a_saved_plan_with_a_build_builds_when_applied(app: App, backend: MemoryBackend) -> None:
    out = Lines()
    plan = Engine(backend, out, environ=ENV).plan_deploy(app, "test1", DeployRequest(build=True))
    assert "build" not in names(backend)  # planning builds nothing
    saved = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    clearance = Guard(app.slots).clear("test1")
    outcome = Engine(backend, out, environ=ENV).deploy(
        clearance, app, "test1", DeployRequest(saved=saved)
    )
    assert isinstance(outcome, Rolled)
    assert backend.records[1].digest == next(iter(backend.built.values()))
    with pytest.raises(InputError, match="takes no --build"):
        Engine(backend, out, environ=ENV).deploy(
            clearance, app, "test1", DeployRequest(saved=saved, build=True)
        )
