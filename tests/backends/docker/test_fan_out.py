"""Hosts in parallel on the real test hosts (A over its socket, B over SSH): each wave of a
rollout — create on every host, wait on every host, switch every host, remove on every
host — runs on both hosts at once; with ``batch = 1`` the hosts roll one after the other;
a failure on one host still puts both back on the deployed release; SSH channels are
reused across Engine API calls."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from shipway.backends.docker.steps import DockerSteps
from shipway.engine import Rolled
from tests.backends.docker.conftest import Deployment, Lines


def host_names(deployment: Deployment) -> list[str]:
    """The hosts as the backend names them, in the slot's order (A, then B)."""
    backend = deployment.backend()
    try:
        return [h.name for h in backend.host_addresses]
    finally:
        backend.close()


class Meeting:
    """Wraps a backend method so that each call waits until ``parties`` calls are inside
    it at once: a walk that gives one host at a time never gets there (BrokenBarrierError
    after the timeout)."""

    def __init__(self, parties: int, kinds: set[str]) -> None:
        self.barrier = threading.Barrier(parties, timeout=30)
        self.kinds = kinds
        self.met: list[str] = []

    def wrap(self, real: Any) -> Any:
        def apply(backend: Any, clearance: Any, target: Any, unit: Any, *rest: Any) -> Any:
            if unit.kind in self.kinds:
                self.barrier.wait()  # raises BrokenBarrierError when the other never comes
                self.met.append(str(unit.host))
            return real(backend, clearance, target, unit, *rest)

        return apply


def test_a_redeploy_applies_each_wave_on_both_hosts_at_once(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment.write()
    assert deployment.deploy().ok
    meeting = Meeting(2, {"container", "route"})
    monkeypatch.setattr(DockerSteps, "apply", meeting.wrap(DockerSteps.apply))
    deployment.write(image=deployment.env.images.v2)
    outcome = deployment.deploy()
    assert outcome.ok, outcome.line()
    # both hosts were inside the create, then inside the switch, at the same time
    assert sorted(meeting.met) == sorted(host_names(deployment) * 2)
    for host in (deployment.env.a, deployment.env.b):
        assert deployment.get(host)[1].strip() == "v2"


def test_with_batch_1_the_second_host_starts_after_the_first_switched(
    deployment: Deployment,
) -> None:
    deployment.write(slot_extra="batch = 1")
    assert deployment.deploy().ok
    deployment.write(image=deployment.env.images.v2, slot_extra="batch = 1")
    lines = Lines()
    outcome = deployment.deploy(lines)
    assert outcome.ok, outcome.line()
    steps = [line for line in lines.lines if line.startswith("[")]
    a, b = host_names(deployment)

    def index(word: str, host: str) -> int:
        return next(i for i, s in enumerate(steps) if word in s and f" on {host}" in s)

    # host A rolls whole (new container, gate, switch, old one removed) before B begins
    assert index("create container/", a) < index("wait until web", a)
    assert index("wait until web", a) < index("update route/", a)
    assert index("update route/", a) < index("remove container/", a)
    assert index("remove container/", a) < index("create container/", b)
    for host in (deployment.env.a, deployment.env.b):
        assert deployment.get(host)[1].strip() == "v2"


def test_a_gate_failing_on_one_host_puts_both_back_on_the_deployed_release(
    deployment: Deployment,
) -> None:
    deployment.write()
    assert deployment.deploy().ok
    deployment.write(image=deployment.env.images.unhealthy)
    outcome = deployment.deploy()
    assert outcome.kind == "rolled-back", outcome.line()
    for host in (deployment.env.a, deployment.env.b):
        assert deployment.get(host)[1].strip() == "v1"
        running = deployment.containers(host, kind="app")
        assert len(running) == 1, [c.name for c in running]


def test_engine_api_calls_over_ssh_share_a_few_channels(deployment: Deployment) -> None:
    deployment.write()
    backend = deployment.backend()
    try:
        conn = backend.connections[host_names(deployment)[1]]
        api = conn.client().api
        for call in (api.version, api.info, api.images, api.networks, api.volumes, api.df):
            call()  # a new URL each time
        transport = conn._ssh_client().get_transport()
        assert transport is not None
        # docker-py alone opened one channel (and one dial-stdio) per distinct URL (7 here,
        # the version probe's included); shared, they are the one in use and the spares
        # kept open ahead of need
        adapter = conn._adapter
        assert adapter is not None
        opened = len(transport._channels.values())  # type: ignore[attr-defined]
        assert opened <= 1 + adapter._pool.spare, f"{opened} channels open for the calls"
    finally:
        backend.close()


def test_a_switch_reads_the_routes_again_under_the_proxy_s_lock(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared proxy's files are read again by the switch, once per host, under the
    proxy's lock: another app's slot may have changed its own part since the observation
    (the slot's lock does not keep it from doing so)."""
    from shipway.backends.docker import proxy as proxy_module

    env = deployment.env
    deployment.write()
    assert isinstance(deployment.deploy(), Rolled)
    reads: list[str] = []
    real = proxy_module.read_tree

    def counted(container: Any, path: str) -> dict[str, tuple[bytes, int]]:
        reads.append(str(container.name))
        return real(container, path)

    monkeypatch.setattr(proxy_module, "read_tree", counted)
    outcome = deployment.deploy(image=env.images.v2)
    assert isinstance(outcome, Rolled), outcome.line()
    assert reads == [f"shipway-proxy-{deployment.port}"] * 2
    for host in (env.a, env.b):
        assert deployment.get(host) == (200, "v2\n")
