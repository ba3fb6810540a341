"""Volumes on the real Docker hosts: one named, labelled volume per app, slot and volume on
each host that runs a process mounting it; data written by r1's container is read by r2's,
after a rollback, after ``stop`` and ``deploy``; ``destroy`` keeps it unless told
``--volumes``, and is refused without the slot's name typed back."""

from __future__ import annotations

from typing import Any

import docker
import pytest

from shipway import api
from shipway.backends.docker.execs import run_in
from shipway.engine import Rolled
from shipway.errors import ConfirmationRequired
from tests.backends.docker.conftest import SLOT, WEB, Deployment, Lines
from tests.testenv.docker import DockerHost

#: web serves /app/www with httpd: a volume at www/data (relative to the image's WORKDIR
#: /app) is served at /data/; the worker mounts nothing
PROCESSES = WEB + """
[processes.worker]
command = ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"]
"""
VOLUME = """
[volumes.data]
path = "www/data"
processes = ["web"]
"""


def volume_name(d: Deployment) -> str:
    return f"shipway-{d.name}-{SLOT}-data-data"


def volumes_on(d: Deployment, host: DockerHost) -> list[Any]:
    client = d.local(host)
    try:
        label = {"label": [f"org.shipway.app={d.name}", "org.shipway.kind=volume"]}
        return list(client.volumes.list(filters=label))
    finally:
        client.close()


def web(d: Deployment, host: DockerHost) -> Any:
    (container,) = d.containers(host, kind="app", process="web")
    return container


def write(d: Deployment, host: DockerHost, text: str) -> None:
    """Written by the running web container itself, into its volume."""
    code, out = run_in(web(d, host), ["sh", "-c", f"echo {text} >> /app/www/data/note"])
    assert code == 0, out


def roll(d: Deployment) -> None:
    outcome = d.deploy(Lines())
    assert isinstance(outcome, Rolled), outcome.line()


def test_data_outlives_deploys_a_rollback_stop_and_deploy(
    deployment: Deployment,
) -> None:
    env, d = deployment.env, deployment
    d.write(processes=PROCESSES + VOLUME)
    plan = api.plan(d.app(), SLOT)
    text = "\n".join(plan.describe())
    assert text.count("create volume/data@") == 2  # one on each host
    assert "not created yet" in text
    assert "note: volume data is a separate Docker volume on each of its 2 hosts" in text
    roll(d)
    for host in (env.a, env.b):
        (volume,) = volumes_on(d, host)
        assert volume.name == volume_name(d)
        assert volume.attrs["Labels"]["org.shipway.slot"] == SLOT
        mounts = {m["Destination"]: m for m in web(d, host).attrs["Mounts"]}
        assert mounts["/app/www/data"]["Name"] == volume_name(d) and mounts["/app/www/data"]["RW"]
        (worker,) = d.containers(host, kind="app", process="worker")
        assert all(m.get("Name") != volume_name(d) for m in worker.attrs["Mounts"])
    write(d, env.a, "one-a")
    write(d, env.b, "one-b")
    assert d.get(env.a, "/data/note") == (200, "one-a\n")

    d.write(processes=PROCESSES + VOLUME, image=env.images.v2)
    roll(d)
    assert d.get(env.a) == (200, "v2\n")
    assert d.get(env.a, "/data/note") == (200, "one-a\n")  # r2 reads what r1 wrote
    assert d.get(env.b, "/data/note") == (200, "one-b\n")  # each host its own volume
    write(d, env.a, "two")

    outcome = api.rollback(d.app(), SLOT, reporter=Lines(), timeout=120)
    assert isinstance(outcome, Rolled), outcome.line()
    assert d.get(env.a) == (200, "v1\n")
    assert d.get(env.a, "/data/note") == (200, "one-a\ntwo\n")

    api.stop(d.app(), SLOT, reporter=Lines())
    assert d.containers(env.a, kind="app") == []
    assert [v.name for v in volumes_on(d, env.a)] == [volume_name(d)]
    roll(d)
    assert d.get(env.a, "/data/note") == (200, "one-a\ntwo\n")

    status = api.status(d.app(), SLOT)
    assert sorted(v.host or "" for v in status.volumes) == sorted(["docker-a", env.b.address])
    assert all(v.state == "present" and v.where == volume_name(d) for v in status.volumes)
    assert all(v.size_bytes is not None and v.size_bytes > 0 for v in status.volumes)


def test_destroy_keeps_the_data_unless_told_volumes_and_needs_the_slot_typed_back(
    deployment: Deployment,
) -> None:
    env, d = deployment.env, deployment
    d.write(processes=PROCESSES.split("[processes.worker]")[0] + VOLUME, hosts=[env.b])
    roll(d)
    write(d, env.b, "kept")

    with pytest.raises(ConfirmationRequired):
        api.destroy(d.app(), SLOT)
    assert len(d.containers(env.b, kind="app")) == 1  # refused: nothing touched

    listed = api.leftovers(d.app(), SLOT)
    assert [item.kind for item in listed if item.data] == ["volume"]
    assert {"container", "proxy", "network", "release record"} <= {i.kind for i in listed}
    gone = api.destroy(d.app(), SLOT, confirm=SLOT, reporter=Lines())
    assert not any(item.data for item in gone)
    left = d.containers(env.b)
    assert left == [], [c.name for c in left]  # containers, records, lock: all gone
    assert [v.name for v in volumes_on(d, env.b)] == [volume_name(d)]
    assert api.history(d.app(), SLOT) == []
    roll(d)  # a new first deploy mounts the data again
    assert d.get(env.b, "/data/note") == (200, "kept\n")

    gone = api.destroy(d.app(), SLOT, volumes=True, confirm=SLOT, reporter=Lines())
    assert [item.data for item in gone].count(True) == 1
    for host in (env.b,):
        assert volumes_on(d, host) == []
        client = d.local(host)
        try:
            with pytest.raises(docker.errors.NotFound):
                client.volumes.get(volume_name(d))
        finally:
            client.close()
