"""Release records on the slot's first host (here B, over SSH): atomic rewrites, deletion,
a size limit with a hint, and every mutation behind the clearance."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import replace
from typing import Any

import docker.errors
import pytest

from shipway import api
from shipway.backends.docker import labels
from shipway.backends.protocol import LockHolder
from shipway.engine import Rolled
from shipway.errors import ClearanceError, RecordError
from shipway.guard import Guard
from shipway.release import codec
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import Release, ReleaseStatus
from tests.backends.docker.conftest import SLOT, Deployment, Lines


def test_records_round_trip_rewrite_and_delete_on_the_first_host(deployment: Deployment) -> None:
    env = deployment.env
    app, backend, target, clearance = deployment.on_hosts([env.b, env.a])
    r1 = deployment.pending(app, 1)
    r2 = replace(r1, revision=2)
    backend.write_records(clearance, target, [r1, r2])
    backend.write_records(clearance, target, [r1.with_status(ReleaseStatus.DEPLOYED, "done")])
    got = {r.revision: r for r in backend.read_records(target)}
    assert got[1].status == ReleaseStatus.DEPLOYED and got[1].description == "done"
    assert got[2].status == ReleaseStatus.PENDING
    # one container per revision: the older version of r1 was removed after the new one
    records = deployment.containers(env.b, kind="record")
    assert sorted(c.labels[labels.REVISION] for c in records) == ["1", "2"]
    assert deployment.containers(env.a, kind="record") == []  # first host only
    backend.delete_records(clearance, target, [2])
    assert [r.revision for r in backend.read_records(target)] == [1]

    foreign = replace(target, slot="elsewhere")
    with pytest.raises(ClearanceError):
        backend.write_records(clearance, foreign, [r1])


def test_under_the_lock_records_are_written_from_what_the_read_found(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the lock holder has read the records, a write lists nothing first (it knows the
    older versions it removes), and a holder image gone from the host is imported again
    when the engine says it is missing."""
    from shipway.backends.docker import records

    env = deployment.env
    app, backend, target, clearance = deployment.on_hosts([env.a])
    r1 = deployment.pending(app, 1)
    lists: list[int | None] = []
    real = records.RecordStore._containers

    def counted(self: records.RecordStore, revision: int | None = None) -> list[Any]:
        lists.append(revision)
        return real(self, revision)

    monkeypatch.setattr(records.RecordStore, "_containers", counted)
    with backend.lock(clearance, target, LockHolder.me(ttl=30), Lines()):
        assert backend.read_records(target) == []
        assert lists == [None]  # the one read
        backend.write_records(clearance, target, [r1])
        # untagged while the lock's container still uses it: the next create finds no image
        deployment.local(env.a).images.remove(labels.HOLDER_IMAGE, force=True)
        backend.write_records(clearance, target, [r1.with_status(ReleaseStatus.DEPLOYED, "x")])
        backend.write_records(clearance, target, [r1.with_status(ReleaseStatus.DEPLOYED, "y")])
        assert lists == [None]  # no write listed the records
    got = backend.read_records(target)
    assert [(r.revision, r.description) for r in got] == [(1, "y")]
    assert len(deployment.containers(env.a, kind="record")) == 1  # the older ones removed
    deployment.local(env.a).images.get(labels.HOLDER_IMAGE)  # imported again
    # without the lock nothing is known: a write lists the revision's records first
    lists.clear()
    backend.write_records(clearance, target, [r1.with_status(ReleaseStatus.DEPLOYED, "z")])
    assert lists == [1]
    assert len(deployment.containers(env.a, kind="record")) == 1


def test_a_record_too_large_for_its_store_is_refused_with_a_hint(deployment: Deployment) -> None:
    env = deployment.env
    app = deployment.write(hosts=[env.a])
    backend = deployment.backend()
    target = app.slots.target(SLOT)
    clearance = Guard(app.slots).clear(SLOT)
    noise = os.urandom(600 * 1024).hex()  # does not compress
    huge = Release(
        app=app.name,
        slot=SLOT,
        revision=1,
        status=ReleaseStatus.PENDING,
        artifact=Artifact((Unit(key="files/x@a", kind="files", body={"blob": noise}),)),
    )
    with pytest.raises(RecordError, match=r"over the \d+-byte limit"):
        backend.write_records(clearance, target, [huge])
    assert backend.read_records(target) == []


def test_stop_removes_what_runs_keeps_the_records_and_repair_brings_it_back(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    api.stop(deployment.app(), SLOT, reporter=Lines())
    kinds = {c.labels["org.shipway.kind"] for c in deployment.containers(env.a)}
    assert kinds == {"record"}
    assert [r.status for r in api.history(deployment.app(), SLOT)] == [ReleaseStatus.DEPLOYED]
    outcome = api.repair(deployment.app(), SLOT, reporter=Lines(), timeout=120)
    assert isinstance(outcome, Rolled), outcome.line()
    assert deployment.get(env.a) == (200, "v1\n")


def test_a_host_that_lost_the_holder_image_still_locks_stops_and_repairs(
    deployment: Deployment,
) -> None:
    """The lock, the shared proxy's lock, files volumes and records are holder containers:
    an image prune (or another tool) may untag ``shipway-holder`` at any moment, and every
    one of them imports it again instead of failing the operation."""
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    host = deployment.local(env.a)

    def lose_the_image() -> None:
        with contextlib.suppress(docker.errors.ImageNotFound):
            host.images.remove(labels.HOLDER_IMAGE, force=True)

    lose_the_image()
    api.stop(deployment.app(), SLOT, reporter=Lines())  # its lock, then the proxy's
    host.images.get(labels.HOLDER_IMAGE)  # imported again
    lose_the_image()
    outcome = api.repair(deployment.app(), SLOT, reporter=Lines(), timeout=120)
    assert isinstance(outcome, Rolled), outcome.line()
    assert deployment.get(env.a) == (200, "v1\n")
    assert len(api.history(deployment.app(), SLOT)) == 2  # the repair's record written


def test_secret_values_never_reach_logs_records_or_plans(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = deployment.env
    secret = "s3cret-5f0a9c2e"
    monkeypatch.setenv("LOGS_TOKEN", secret)
    deployment.write(
        hosts=[env.a],
        extra='[secrets]\nTOKEN = { from_env = "LOGS_TOKEN" }\n',
        processes="""
[processes.worker]
command = ["sh", "-c", "echo the token is $TOKEN; exec /app/worker"]
""",
    )
    assert isinstance(deployment.deploy(), Rolled)
    (worker,) = deployment.containers(env.a, kind="app")
    assert f"the token is {secret}" in worker.logs().decode()  # it did get the value
    lines = list(api.logs(deployment.app(), SLOT, "worker", lines=5))
    assert any("the token is ***" in line for line in lines), lines
    texts = [
        "\n".join(lines),
        json.dumps([codec.to_json(r) for r in api.history(deployment.app(), SLOT)]),
        json.dumps(api.plan(deployment.app(), SLOT).to_json()),
        json.dumps(api.status(deployment.app(), SLOT).to_json()),
        json.dumps(worker.labels),
    ]
    assert not any(secret in text for text in texts)
