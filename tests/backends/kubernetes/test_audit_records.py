"""The audit and the freeze kept in a Kubernetes slot's namespace: a record's audit
round-trips through its record Secret, and a freeze is a ConfigMap there, replaced, lifted,
and never written without the slot's clearance."""

from __future__ import annotations

from dataclasses import replace

import pytest
from lightkube.resources.core_v1 import ConfigMap

from shipway.errors import ClearanceError
from shipway.guard import Guard
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
