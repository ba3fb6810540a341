"""The audit and the freeze kept in a Docker slot's target: a record's audit round-trips
through the record containers of the first host, and a freeze is a holder container there,
replaced atomically, lifted, never written without the slot's clearance, shown by status
and kept through a destroy."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shipway import api
from shipway.errors import ClearanceError, SlotFrozen
from shipway.events.model import Ended, Started
from shipway.events.sink import Recorded
from shipway.guard import breaking_glass
from shipway.spec.freeze import Freeze
from tests.backends.docker.conftest import SLOT, Deployment
from tests.release.test_audit import AUDIT


def test_the_audit_round_trips_through_the_record_containers(deployment: Deployment) -> None:
    env = deployment.env
    app, backend, target, clearance = deployment.on_hosts([env.a])
    release = replace(deployment.pending(app, 1), audit=AUDIT)
    backend.write_records(clearance, target, [release])
    (read,) = backend.read_records(target)
    assert read.audit == AUDIT


def test_a_freeze_is_kept_replaced_and_lifted_on_the_first_host(deployment: Deployment) -> None:
    env = deployment.env
    _, backend, target, clearance = deployment.on_hosts([env.b, env.a])
    assert backend.read_freeze(target) is None
    first = Freeze("incident 1", "2999-01-01T00:00:00+00:00", by="ops@desk", since="x")
    backend.write_freeze(clearance, target, first)
    second = replace(first, reason="incident 2")
    backend.write_freeze(clearance, target, second)
    assert backend.read_freeze(target) == second
    assert len(deployment.containers(env.b, kind="freeze")) == 1  # the older one removed
    assert deployment.containers(env.a, kind="freeze") == []  # the first host only
    with pytest.raises(ClearanceError):
        backend.write_freeze(clearance, replace(target, slot="elsewhere"), None)
    backend.write_freeze(clearance, target, None)
    assert backend.read_freeze(target) is None
    assert deployment.containers(env.b, kind="freeze") == []


def test_a_freeze_outlives_a_destroy_and_status_reads_it_from_the_host(
    deployment: Deployment,
) -> None:
    """The rule every backend follows (docs/events.md): destroy deletes what shipway made
    for the app in the slot, never the freeze someone set on it."""
    env = deployment.env
    app = deployment.write(hosts=[env.a])
    assert deployment.deploy().ok
    until = (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="seconds")
    frozen = Freeze("incident 7", until, by="ops@desk", since="x")
    told = Recorded()
    api.freeze(app, SLOT, frozen, reporter=told)
    assert [e.kind for e in told.events] == ["started", "ended"]
    assert api.status(app, SLOT).freezes == [frozen]  # read from the slot's first host
    with pytest.raises(SlotFrozen):
        api.destroy(app, SLOT, confirm=SLOT)

    told = Recorded()
    with breaking_glass("tear down 7"):
        gone = api.destroy(app, SLOT, confirm=SLOT, reporter=told)
    assert gone
    (started,) = told.of(Started)
    assert isinstance(started, Started) and started.who.break_glass == "tear down 7"
    (ended,) = told.of(Ended)
    assert isinstance(ended, Ended) and ended.outcome == "done"
    assert "the freeze stays" in ended.details[0] and "incident 7" in ended.details[0]
    kinds = [c.labels.get("org.shipway.kind") for c in deployment.containers(env.a)]
    assert kinds == ["freeze"]  # everything else went; the freeze holder stays
    assert api.status(app, SLOT).freezes == [frozen]
    with pytest.raises(SlotFrozen):
        deployment.deploy()
    api.freeze(app, SLOT, None)
    assert deployment.containers(env.a, kind="freeze") == []
