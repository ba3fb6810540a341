"""Sequencing tests of the engine against the in-memory backend: what is called, in what
order, and which honest outcome comes out. (Backends are tested against real engines.)"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest

from shipway import api
from shipway.backends.memory import MemoryBackend, expire_lock
from shipway.backends.protocol import Failure, LockHolder, ResolvedImage
from shipway.engine import (
    Engine,
    Interrupted,
    NoAnchor,
    RollbackFailed,
    Rolled,
    RolledBack,
    outcome_from_json,
)
from shipway.engine.request import DeployRequest
from shipway.errors import (
    BackendError,
    ClearanceError,
    ImageMetadataMissing,
    InputError,
    SlotLocked,
    StalePlan,
)
from shipway.guard import Guard
from shipway.plan import Plan
from shipway.release import codec
from shipway.release.model import ImageMeta, ReleaseStatus
from shipway.spec import App
from tests.conftest import app_from_toml

SPEC = """
[app]
name = "shop"
image = "reg/shop:1"
release_command = "migrate"

[processes.web]
command = "serve"
port = 8000

[processes.worker]
command = "work"

[secrets]
TOKEN = { from_env = "SHOP_TOKEN" }

[slots.test1]
promotes_to = "prod"
history_limit = 10
routes = [{ host = "shop.example.com", process = "web" }]

[slots.prod]
role = "production"
routes = [{ host = "www.shop.example.com", process = "web" }]
"""
ENV = {"SHOP_TOKEN": "tok-3141592653"}


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)

    def progress(self, process: str, counts: Any, note: str = "") -> None:
        self.lines.append(f"{process} {dict(counts)} {note}")


def engine(backend: MemoryBackend, out: Lines) -> Engine:
    return Engine(backend, out, actor="tester@test", environ=ENV)


def deploy(
    app: App,
    backend: MemoryBackend,
    out: Lines,
    image: str | None = "reg/shop:1",
    slot: str = "test1",
    **kw: Any,
) -> Any:
    clearance = Guard(app.slots).clear(slot, confirm=slot if slot == "prod" else None)
    return engine(backend, out).deploy(clearance, app, slot, DeployRequest(image=image, **kw))


def statuses(backend: MemoryBackend) -> dict[int, str]:
    return {n: str(r.status) for n, r in backend.records.items()}


MUTATIONS = {
    "write_records",
    "apply",
    "remove",
    "run_release_command",
    "scale",
    "point_host",
    "drop_host",
    "delete_records",
    "stop",
}


def first(calls: list[tuple[str, str]], names: set[str]) -> int:
    return next(i for i, (name, _) in enumerate(calls) if name in names)


def test_first_deploy_rolls_and_records(app: App, backend: MemoryBackend, out: Lines) -> None:
    outcome = deploy(app, backend, out)
    assert isinstance(outcome, Rolled)
    assert (outcome.from_revision, outcome.to_revision, outcome.exit_code) == (None, 1, 0)
    assert statuses(backend) == {1: "deployed"}
    assert set(backend.live) == {
        "config/shop",
        "workload/web",
        "workload/worker",
        "route/shop.example.com",
    }
    assert backend.lock_holder is None


def test_anchor_is_read_before_any_mutation(app: App, backend: MemoryBackend, out: Lines) -> None:
    deploy(app, backend, out)
    backend.calls.clear()
    deploy(app, backend, out, image="reg/shop:2")
    calls = backend.calls
    assert calls[0][0] == "lock"
    assert first(calls, {"read_records"}) < first(calls, MUTATIONS)
    assert first(calls, {"observe"}) < first(calls, MUTATIONS)
    # the pending record is written before the first change to the workloads
    assert first(calls, {"write_records"}) < first(calls, {"apply"})
    assert calls[first(calls, {"write_records"})][1] == "r2:pending"


def test_a_clearance_for_another_slot_calls_nothing_at_all(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    wrong = Guard(app.slots).clear("test1")
    e = engine(backend, out)
    with pytest.raises(ClearanceError):
        e.deploy(wrong, app, "prod")
    with pytest.raises(ClearanceError):
        e.restart(wrong, app, "prod", "web")
    with pytest.raises(ClearanceError):
        e.rollback(wrong, app, "prod")
    assert backend.calls == []


def test_plan_and_dry_run_call_nothing_that_mutates(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    backend.calls.clear()
    p = engine(backend, out).plan_deploy(app, "test1", DeployRequest(image="reg/shop:2"))
    assert p.mutates
    api.object_diff(app, "test1", p, backend=backend)
    engine(backend, out).changes(app, "test1")
    api.diff(app, "test1", 1, backend=backend)
    assert backend.calls and not backend.mutations()


def test_a_failed_rollout_puts_the_anchor_back(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    before = {k: v.unit.digest for k, v in backend.live.items()}
    backend.doomed_images.add("reg/shop:bad")
    outcome = deploy(app, backend, out, image="reg/shop:bad")
    assert isinstance(outcome, RolledBack)
    assert (outcome.failed_revision, outcome.to_revision, outcome.exit_code) == (2, 1, 10)
    assert outcome.failure.reason == "CrashLoopBackOff"
    assert {k: v.unit.digest for k, v in backend.live.items()} == before
    assert statuses(backend) == {1: "deployed", 2: "failed"}
    assert "the deploy is not done" in outcome.line()
    assert backend.lock_holder is None


def test_a_failed_rollback_is_its_own_outcome(app: App, backend: MemoryBackend, out: Lines) -> None:
    deploy(app, backend, out)
    backend.doomed_images |= {"reg/shop:1", "reg/shop:bad"}
    outcome = deploy(app, backend, out, image="reg/shop:bad")
    assert isinstance(outcome, RollbackFailed)
    assert outcome.exit_code == 11
    assert "MAY BE DOWN" in outcome.line()
    assert outcome.to_json()["may_be_down"] is True
    assert statuses(backend) == {1: "deployed", 2: "failed"}


def test_no_anchor_means_nothing_restored(app: App, backend: MemoryBackend, out: Lines) -> None:
    backend.doomed_images.add("reg/shop:bad")
    outcome = deploy(app, backend, out, image="reg/shop:bad")
    assert isinstance(outcome, NoAnchor)
    assert outcome.exit_code == 12
    assert "nothing was restored" in outcome.line()
    assert statuses(backend) == {1: "failed"}
    # the workloads the failed first deploy created are stopped; no earlier release applied
    assert not any(k.startswith("workload/") for k in backend.live)
    applied = [d for n, d in backend.calls if n == "apply"]
    assert all(d.startswith("create ") for d in applied)


def test_failed_release_command_rolls_back_before_anything_switched(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    backend.failing_release_command = True
    backend.calls.clear()
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, RolledBack)
    assert outcome.failure.reason == "ReleaseCommandFailed"
    # workloads switch in place: the release command ran before any of them was applied,
    # and its failure stopped the rollout there
    calls = [(n, d) for n, d in backend.calls if n in ("apply", "run_release_command")]
    assert calls == [("run_release_command", "migrate")]


def test_locked_slot_refuses_naming_the_holder(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    backend.lock_holder = LockHolder(
        holder="ci@runner (pid 42)",
        host="runner",
        pid=42,
        since="2026-11-29T10:00:00+00:00",
        ttl=60,
    )
    backend.lock_taken_at = __import__("time").monotonic()
    with pytest.raises(SlotLocked) as err:
        deploy(app, backend, out)
    assert err.value.exit_code == 4
    assert "ci@runner (pid 42)" in str(err.value) and "2026-11-29T10:00:00" in str(err.value)
    assert backend.calls == [("lock", "")]  # the refused attempt, and nothing after it


def test_expired_lock_is_taken_over_with_a_line(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    backend.lock_holder = LockHolder(
        holder="ci@runner (pid 42)", host="runner", pid=42, since="2026-11-29T10:00:00+00:00", ttl=1
    )
    expire_lock(backend)
    assert isinstance(deploy(app, backend, out), Rolled)
    assert any("broke an expired lock held by ci@runner (pid 42)" in line for line in out.lines)


def test_pending_release_is_recovered_and_anchor_reasserted(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    anchor_units = {k: v.unit.digest for k, v in backend.live.items()}
    # a deploy died half-way: r2 pending, its new web workload applied
    plan = engine(backend, out).plan_deploy(app, "test1", DeployRequest(image="reg/shop:2"))
    assert plan.release is not None
    backend.records[2] = plan.release
    new_web = plan.release.artifact.get("workload/web")
    backend.apply(
        Guard(app.slots).clear("test1"), app.slots.target("test1"), new_web, "update", {}, out
    )
    backend.calls.clear()
    outcome = deploy(app, backend, out, image="reg/shop:3")
    assert isinstance(outcome, Rolled) and outcome.to_revision == 3
    assert statuses(backend) == {1: "superseded", 2: "failed", 3: "deployed"}
    assert any("r2 was left pending" in line for line in out.lines)
    assert any("re-asserting r1" in line for line in out.lines)
    reassert = next(d for n, d in backend.calls if n == "apply")
    assert reassert == "update workload/web"
    assert anchor_units["workload/web"] != new_web.digest


def test_sigterm_marks_pending_failed_restores_the_anchor_and_releases_the_lock(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    anchor = {k: v.unit.digest for k, v in backend.live.items()}

    def once() -> None:
        del backend.on_call["wait"]
        os.kill(os.getpid(), signal.SIGTERM)

    backend.on_call["wait"] = once
    with pytest.raises(Interrupted) as err:
        deploy(app, backend, out, image="reg/shop:2")
    assert err.value.exit_code == 128 + signal.SIGTERM
    assert statuses(backend) == {1: "deployed", 2: "failed"}
    assert "SIGTERM" in backend.records[2].description
    # the slot does not keep serving a release its history calls failed
    assert {k: v.unit.digest for k, v in backend.live.items()} == anchor
    assert any("restoring r1 done" in line for line in out.lines)
    assert backend.lock_holder is None
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_second_signal_stops_the_undo(app: App, backend: MemoryBackend, out: Lines) -> None:
    deploy(app, backend, out)
    backend.on_call["wait"] = lambda: os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(Interrupted):
        deploy(app, backend, out, image="reg/shop:2")
    assert statuses(backend) == {1: "deployed", 2: "failed"}
    assert backend.lock_holder is None


def test_saved_plan_is_applied_exactly(app: App, backend: MemoryBackend, out: Lines) -> None:
    deploy(app, backend, out)
    saved = Plan.from_json(
        json.loads(
            json.dumps(
                engine(backend, out)
                .plan_deploy(app, "test1", DeployRequest(image="reg/shop:2"))
                .to_json()
            )
        )
    )
    outcome = deploy(app, backend, out, image=None, saved=saved)
    assert isinstance(outcome, Rolled) and outcome.to_revision == 2
    assert saved.release is not None
    assert backend.records[2].deployment_ids == saved.release.deployment_ids
    assert (
        backend.live["workload/web"].unit.digest
        == saved.release.artifact.get("workload/web").digest
    )


@pytest.mark.parametrize("extra", [{"image": "reg/shop:3"}, {"take_host": True}])
def test_a_saved_plan_takes_no_image_or_take_host(
    app: App, backend: MemoryBackend, out: Lines, extra: dict[str, Any]
) -> None:
    deploy(app, backend, out)
    saved = engine(backend, out).plan_deploy(app, "test1", DeployRequest(image="reg/shop:2"))
    backend.calls.clear()
    clearance = Guard(app.slots).clear("test1")
    with pytest.raises(InputError, match="applied exactly as it was made"):
        engine(backend, out).deploy(clearance, app, "test1", DeployRequest(saved=saved, **extra))
    assert backend.mutations() == []


def test_stale_saved_plan_is_refused_listing_what_changed(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    saved = engine(backend, out).plan_deploy(app, "test1", DeployRequest(image="reg/shop:2"))
    deploy(app, backend, out, image="reg/shop:3")
    backend.calls.clear()
    with pytest.raises(StalePlan) as err:
        deploy(app, backend, out, image=None, saved=saved)
    assert err.value.exit_code == 5
    text = str(err.value)
    assert "release history changed: r1:deployed -> r2:deployed" in text
    assert "workload/web changed" in text
    assert not [c for c in backend.mutations() if c[0] != "lock"]


def test_targeted_restart_renews_only_the_target(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    ids = dict(backend.records[1].deployment_ids)
    worker_before = backend.live["workload/worker"].unit
    backend.calls.clear()
    clearance = Guard(app.slots).clear("test1")
    outcome = engine(backend, out).restart(clearance, app, "test1", "web")
    assert isinstance(outcome, Rolled)
    new_ids = backend.records[2].deployment_ids
    assert new_ids["worker"] == ids["worker"]
    assert new_ids["web"] != ids["web"]
    assert [d for n, d in backend.calls if n == "apply"] == ["update workload/web"]
    assert backend.live["workload/worker"].unit == worker_before
    assert not any(n == "run_release_command" for n, _ in backend.calls)


def test_restart_of_a_legacy_record_keeps_its_global_id_for_the_others(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    legacy = codec.to_json(backend.records[1])
    del legacy["deployment_ids"]
    legacy.update(schema=1, deployment_id="legacy-7")
    backend.records[1] = codec.decode(json.dumps(legacy).encode())
    outcome = engine(backend, out).restart(Guard(app.slots).clear("test1"), app, "test1", "web")
    assert isinstance(outcome, Rolled)
    ids = backend.records[2].deployment_ids
    assert ids["worker"] == "legacy-7" and ids["web"] != "legacy-7"


def test_restart_without_deployed_release_is_input_error(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    with pytest.raises(Exception, match="nothing is deployed") as err:
        engine(backend, out).restart(Guard(app.slots).clear("test1"), app, "test1", "web")
    assert getattr(err.value, "exit_code", None) == 2


def test_image_metadata_comes_from_the_record_when_the_image_is_gone(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    backend.images["reg/shop:1"] = ResolvedImage(
        "reg/shop:1", "sha256:aa", ImageMeta("herokuish", "/app")
    )
    deploy(app, backend, out)
    # the image is reaped from the engine: inspecting it yields no metadata
    backend.images["reg/shop:1"] = ResolvedImage("reg/shop:1", None, None)
    outcome = engine(backend, out).restart(Guard(app.slots).clear("test1"), app, "test1", "web")
    assert isinstance(outcome, Rolled)
    assert backend.records[2].image_meta == ImageMeta("herokuish", "/app")


def test_unknown_image_without_record_or_declaration_is_a_clear_error(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    backend.images["reg/other:9"] = ResolvedImage("reg/other:9", None, None)
    with pytest.raises(ImageMetadataMissing, match="image_type") as err:
        deploy(app, backend, out, image="reg/other:9")
    assert err.value.exit_code == 2
    assert backend.records == {}


def test_rollback_reapplies_a_recorded_artifact_as_a_new_revision(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    r1_web = backend.live["workload/web"].unit
    deploy(app, backend, out, image="reg/shop:2")
    outcome = engine(backend, out).rollback(Guard(app.slots).clear("test1"), app, "test1")
    assert isinstance(outcome, Rolled) and outcome.to_revision == 3
    assert backend.live["workload/web"].unit == r1_web
    assert backend.records[3].description == "rollback to r1"
    assert statuses(backend) == {1: "superseded", 2: "superseded", 3: "deployed"}


def test_history_is_capped_keeping_the_latest_deployed(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    for n in range(12):
        deploy(app, backend, out, image=f"reg/shop:{n}")
    assert sorted(backend.records) == list(range(3, 13))
    assert backend.records[12].status == ReleaseStatus.DEPLOYED


def test_secret_values_never_reach_output_plans_or_records(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    p = engine(backend, out).plan_deploy(app, "test1", DeployRequest(image="reg/shop:2"))
    blobs = [json.dumps(p.to_json()), "\n".join(out.lines), "\n".join(p.describe())]
    blobs += [codec.encode(r).decode("latin-1") for r in backend.records.values()]
    blobs += [json.dumps(codec.to_json(r)) for r in backend.records.values()]
    assert not any(ENV["SHOP_TOKEN"] in b for b in blobs)
    # ...while the backend did receive the value at apply time
    assert backend.live["config/shop"].revealed["secrets"] == {"TOKEN": ENV["SHOP_TOKEN"]}


def test_a_failure_quoting_a_secret_value_is_masked(
    app: App, backend: MemoryBackend, out: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Backends quote engines (events, log tails); the walk masks values before output."""
    deploy(app, backend, out)

    def leaky_wait(target: Any, step: Any, artifact: Any, *rest: Any) -> Failure | None:
        if artifact.get(step.units[0]).body["image"] != "reg/shop:2":
            return None
        token = ENV["SHOP_TOKEN"]
        return Failure("CrashLoopBackOff", f"bad token {token}", "web", 1, (f"log: {token}",))

    monkeypatch.setattr(backend, "wait", leaky_wait)
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert isinstance(outcome, RolledBack)
    text = json.dumps(outcome.to_json()) + "\n".join(out.lines + outcome.details())
    text += json.dumps([codec.to_json(r) for r in backend.records.values()])
    assert ENV["SHOP_TOKEN"] not in text
    assert "bad token ***" in outcome.failure.message and "log: ***" in outcome.failure.details


def test_outcomes_round_trip_through_json(app: App, backend: MemoryBackend, out: Lines) -> None:
    results = [deploy(app, backend, out)]
    backend.doomed_images.add("bad")
    results.append(deploy(app, backend, out, image="bad"))
    backend.doomed_images.add("reg/shop:1")
    results.append(deploy(app, backend, out, image="bad"))
    fresh = MemoryBackend()
    fresh.doomed_images.add("bad")
    results.append(deploy(app, fresh, out, image="bad"))
    kinds = []
    for outcome in results:
        again = outcome_from_json(json.loads(json.dumps(outcome.to_json())))
        assert again == outcome
        kinds.append(outcome.kind)
    assert kinds == ["rolled", "rolled-back", "rollback-failed", "no-anchor"]


def test_a_signal_right_after_the_pending_record_is_handled_too(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)

    def once() -> None:
        del backend.on_call["write_records"]
        os.kill(os.getpid(), signal.SIGTERM)

    backend.on_call["write_records"] = once
    with pytest.raises(Interrupted):
        deploy(app, backend, out, image="reg/shop:2")
    assert statuses(backend) == {1: "deployed", 2: "failed"}
    assert backend.lock_holder is None


def test_a_rollback_restores_a_secret_the_current_spec_no_longer_declares(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    """r1 used TOKEN; r2's spec dropped it and crashes: r1 comes back with its TOKEN."""
    deploy(app, backend, out)
    without = app_from_toml(SPEC.replace('TOKEN = { from_env = "SHOP_TOKEN" }', ""))
    backend.doomed_images.add("reg/shop:2")
    outcome = deploy(without, backend, out, image="reg/shop:2")
    assert isinstance(outcome, RolledBack), out.lines
    assert backend.live["config/shop"].revealed["secrets"] == {"TOKEN": ENV["SHOP_TOKEN"]}


def test_a_rollback_that_cannot_have_the_anchor_s_secret_is_a_failed_rollback(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    """Not an input error (exit 2, "nothing touched"): r2 was applied, r1 could not be
    restored — the slot may be down, and the outcome says so."""
    deploy(app, backend, out)
    without = app_from_toml(SPEC.replace('TOKEN = { from_env = "SHOP_TOKEN" }', ""))
    backend.doomed_images.add("reg/shop:2")
    gone = Engine(backend, out, actor="tester@test", environ={})
    outcome = gone.deploy(
        Guard(without.slots).clear("test1"), without, "test1", DeployRequest(image="reg/shop:2")
    )
    assert isinstance(outcome, RollbackFailed), out.lines
    assert outcome.exit_code == 11
    assert "secrets.TOKEN" in outcome.rollback_failure.message
    assert statuses(backend) == {1: "deployed", 2: "failed"}
    assert backend.lock_holder is None


def test_an_error_no_step_expected_still_puts_the_anchor_back(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    anchor = {k: v.unit.digest for k, v in backend.live.items()}

    def bug() -> None:
        del backend.on_call["wait"]
        raise RuntimeError(f"a bug in a backend that shows {ENV['SHOP_TOKEN']}")

    backend.on_call["wait"] = bug
    with pytest.raises(RuntimeError):
        deploy(app, backend, out, image="reg/shop:2")
    assert statuses(backend) == {1: "deployed", 2: "failed"}
    assert "a bug in a backend" in backend.records[2].description
    assert ENV["SHOP_TOKEN"] not in backend.records[2].description + "\n".join(out.lines)
    assert {k: v.unit.digest for k, v in backend.live.items()} == anchor
    assert any("stopped: restoring r1 done" in line for line in out.lines)


def test_a_re_assert_that_fails_leaves_the_release_pending_for_the_next_run(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    plan = engine(backend, out).plan_deploy(app, "test1", DeployRequest(image="reg/shop:2"))
    assert plan.release is not None
    backend.records[2] = plan.release  # a deploy died: r2 pending, its web applied
    new_web = plan.release.artifact.get("workload/web")
    clearance, target = Guard(app.slots).clear("test1"), app.slots.target("test1")
    backend.apply(clearance, target, new_web, "update", {}, out)
    backend.broken = True
    with pytest.raises(BackendError, match="r2 stays pending"):
        deploy(app, backend, out, image="reg/shop:3")
    assert statuses(backend)[2] == "pending"
    backend.broken = False
    outcome = deploy(app, backend, out, image="reg/shop:3")
    assert isinstance(outcome, Rolled), out.lines
    assert statuses(backend)[2] == "failed"


def test_a_signal_while_the_release_is_recorded_does_not_cut_the_record_in_half(
    app: App, backend: MemoryBackend, out: Lines
) -> None:
    deploy(app, backend, out)
    sent: list[int] = []

    def signal_on_the_deployed_record() -> None:
        if not sent and "deployed" in backend.calls[-1][1]:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)

    backend.on_call["write_records"] = signal_on_the_deployed_record
    outcome = deploy(app, backend, out, image="reg/shop:2")
    assert sent and isinstance(outcome, Rolled), out.lines
    assert statuses(backend) == {1: "superseded", 2: "deployed"}
    assert any("SIGTERM: finishing the release record first" in line for line in out.lines)


def test_a_failed_rollback_keeps_the_warnings(app: App, backend: MemoryBackend, out: Lines) -> None:
    outcome = RollbackFailed(
        "shop/test1", 2, 1, Failure("A", "a"), Failure("B", "b"), ("cleanup left X",)
    )
    again = outcome_from_json(json.loads(json.dumps(outcome.to_json())))
    assert again == outcome
    assert any("cleanup left X" in line for line in outcome.details())


def test_promote_never_sends_a_tag_that_may_have_moved(
    app: App, backend: MemoryBackend, out: Lines, monkeypatch: pytest.MonkeyPatch
) -> None:
    """r1 recorded no digest (the image was not inspectable): prod gets the digest test1
    runs, or nothing at all when none can be read."""
    monkeypatch.setenv("SHOP_TOKEN", ENV["SHOP_TOKEN"])
    deploy(app, backend, out)
    assert backend.records[1].digest is None
    prod = MemoryBackend()
    with pytest.raises(InputError, match="refusing to promote reg/shop:1 by its tag"):
        api.promote(app, "test1", confirm="prod", source_backend=backend, backend=prod,
                    reporter=out)  # fmt: skip
    assert prod.mutations() == []
    running = "sha256:" + "5" * 64
    backend.live_digest = lambda target, release: running  # type: ignore[method-assign]
    outcome = api.promote(
        app, "test1", confirm="prod", source_backend=backend, backend=prod, reporter=out
    )
    assert isinstance(outcome, Rolled), out.lines
    assert prod.records[1].image == f"reg/shop@{running}"
