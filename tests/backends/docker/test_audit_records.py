"""The audit and the freeze kept in a Docker slot's target: a record's audit round-trips
through the record containers of the first host, and a freeze is a holder container there,
replaced atomically, lifted, and never written without the slot's clearance."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shipway.errors import ClearanceError
from shipway.spec.freeze import Freeze
from tests.backends.docker.conftest import Deployment
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
