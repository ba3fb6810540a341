"""The health gate follows the engine's events on the real test host: a container waiting
out its uptime is inspected a few times, not every 0.15 s; a crash is still seen at once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from docker.models.containers import ContainerCollection

from tests.backends.docker.conftest import Deployment

WORKER = """
[processes.worker]
command = ["/app/worker"]
[processes.worker.healthcheck]
path = false
initial_delay = "3s"
"""


def test_an_uptime_gate_reads_its_container_on_events_not_in_a_loop(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment.write(processes=WORKER, hosts=[deployment.env.a])
    inspected: Counter[str] = Counter()
    real = ContainerCollection.get

    def get(self: ContainerCollection, name: str) -> Any:
        inspected[str(name)] += 1
        return real(self, name)

    monkeypatch.setattr(ContainerCollection, "get", get)
    outcome = deployment.deploy()
    assert outcome.ok, outcome.line()
    (worker,) = [n for n in inspected if "-worker-" in n]
    # three seconds of uptime: polled every 0.15 s that was some 20 inspections
    assert inspected[worker] <= 4, dict(inspected)


def test_a_crash_during_an_uptime_gate_fails_it_with_the_exit_code(
    deployment: Deployment,
) -> None:
    crashing = WORKER.replace('["/app/worker"]', '["sh", "-c", "sleep 1; exit 3"]')
    deployment.write(processes=crashing, hosts=[deployment.env.a])
    outcome = deployment.deploy()
    assert outcome.kind == "no-anchor", outcome.line()
    failure = outcome.failure  # type: ignore[attr-defined]
    assert failure.exit_code == 3, failure
