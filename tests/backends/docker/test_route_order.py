"""On a real Docker host, the web's route moves once the new web passed its gate; a
worker's gate goes on after the switch; a worker that crashed before the web was ready
stops the switch itself, so nothing of the failing release is ever served."""

from __future__ import annotations

from shipway.engine import Rolled, RolledBack
from tests.backends.docker.conftest import WEB, Deployment, Lines

WORKER = """
[processes.worker]
command = {worker}
[processes.worker.healthcheck]
path = false
initial_delay = "3s"
"""


def processes(worker: str = '["/app/worker"]', web_extra: str = "") -> str:
    return WEB + web_extra + "\n" + WORKER.format(worker=worker)


def test_the_new_web_serves_while_the_workers_gate_still_runs(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(processes=processes(), hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    seen: list[tuple[int, str]] = []
    lines = Lines()
    lines.on("] wait until worker is ready", lambda: seen.append(deployment.get(env.a)))
    outcome = deployment.deploy(lines, image=env.images.v2)
    assert isinstance(outcome, Rolled), outcome.line()
    text = lines.text()
    assert text.index("] update route/web") < text.index("] wait until worker is ready")
    assert seen == [(200, "v2\n")]  # served by the new web before the worker's gate ended


def test_a_worker_crashed_before_the_web_was_ready_stops_the_switch(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write(processes=processes(), hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    # the new web answers its check only after 3 s; the new worker exits at once
    deployment.write(
        processes=processes('["sh", "-c", "exit 3"]', 'initial_delay = "3s"'), hosts=[env.a]
    )
    lines = Lines()
    outcome = deployment.deploy(lines, image=env.images.v2)
    assert isinstance(outcome, RolledBack), outcome.line()
    assert (outcome.failure.process, outcome.failure.reason) == ("worker", "Crashed")
    assert outcome.failure.exit_code == 3
    assert "] update route/" not in lines.text()  # the route never moved
    assert deployment.get(env.a) == (200, "v1\n")
