"""The audit and the freeze kept in a Kubernetes slot's namespace: a record's audit
round-trips through its record Secret, and a freeze is a ConfigMap there, replaced, lifted,
never written without the slot's clearance, shown by status and kept through a destroy."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import ConfigMap

from shipway import api
from shipway.errors import ClearanceError, SlotFrozen
from shipway.events.model import Ended, Started
from shipway.events.sink import Recorded
from shipway.guard import Guard, breaking_glass
from shipway.release.model import Release, ReleaseStatus
from shipway.spec.freeze import Freeze
from tests.backends.kubernetes.conftest import Slot
from tests.release.test_audit import AUDIT


def test_the_audit_and_the_freeze_round_trip_through_the_namespace(slot: Slot) -> None:
    app = slot.write()
    backend = slot.backend(app)
    target = app.slots.target("test1")
    clearance = Guard(app.slots).clear("test1")
    release = Release(app.name, "test1", 1, ReleaseStatus.PENDING, image="x:1", audit=AUDIT)
    backend.write_records(clearance, target, [release])
    (read,) = backend.read_records(target)
    assert read.audit == AUDIT

    assert backend.read_freeze(target) is None
    frozen = Freeze("incident 7", "2999-01-01T00:00:00+00:00", by="ops@desk", since="x")
    backend.write_freeze(clearance, target, frozen)
    backend.write_freeze(clearance, target, replace(frozen, reason="incident 8"))
    assert backend.read_freeze(target) == replace(frozen, reason="incident 8")
    kept = slot.client.get(ConfigMap, f"shipway.freeze.v1.{app.name}", namespace=slot.namespace)
    assert kept.metadata.labels == {"owner": "shipway", "name": app.name}
    with pytest.raises(ClearanceError):
        backend.write_freeze(clearance, replace(target, slot="elsewhere"), None)
    backend.write_freeze(clearance, target, None)
    assert backend.read_freeze(target) is None


def test_a_freeze_outlives_a_destroy_and_status_reads_it_from_the_namespace(slot: Slot) -> None:
    """The rule every backend follows (docs/events.md): destroy deletes what shipway made
    for the app in the slot, never the freeze someone set on it."""
    app = slot.write()
    outcome, _ = slot.deploy(app)
    assert outcome.ok
    until = (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="seconds")
    frozen = Freeze("incident 7", until, by="ops@desk", since="x")
    told = Recorded()
    api.freeze(app, "test1", frozen, backend=slot.backend(app), reporter=told)
    assert [e.kind for e in told.events] == ["started", "ended"]
    assert api.status(app, "test1", backend=slot.backend(app)).freezes == [frozen]

    told = Recorded()
    with breaking_glass("tear down 7"):
        api.destroy(app, "test1", confirm="test1", backend=slot.backend(app), reporter=told)
    (started,) = told.of(Started)
    assert isinstance(started, Started) and started.who.break_glass == "tear down 7"
    (ended,) = told.of(Ended)
    assert isinstance(ended, Ended) and "the freeze stays" in ended.details[0]
    assert list(slot.client.list(Deployment, namespace=slot.namespace)) == []
    name = f"shipway.freeze.v1.{app.name}"
    assert slot.client.get(ConfigMap, name, namespace=slot.namespace).data  # it stays
    assert api.status(app, "test1", backend=slot.backend(app)).freezes == [frozen]
    with pytest.raises(SlotFrozen):
        slot.deploy(app)
    api.freeze(app, "test1", None, backend=slot.backend(app))
    assert api.status(app, "test1", backend=slot.backend(app)).freezes == []
