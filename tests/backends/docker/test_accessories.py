"""Accessories on the Docker hosts: a Postgres accessory on host A of a two-host slot,
published on the address the spec gives A and nowhere else, reached by the app's containers
on both hosts, never restarted by an app's deploy, its data kept by ``destroy`` and deleted
by ``destroy --volumes``; and the plan's warning about a release command writing a per-host
volume on a multi-host slot.

The images are the test environment's (``postgres:15`` and ``redis:7`` built from Debian's
packages: nothing can be pulled here), reached through the setting a user with a private
mirror uses too: ``SHIPWAY_ACCESSORY_MIRROR``."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import docker
import pytest

from shipway import api
from shipway.backends.docker.execs import run_in
from shipway.engine import Rolled
from shipway.errors import InputError
from tests.backends.docker.conftest import SLOT, WEB, Deployment, Lines

#: Postgres' SSLRequest; a server answers it with one byte (``N``: no TLS here)
SSL_REQUEST = struct.pack("!ii", 8, 80877103)
SSL_REQUEST_OCTAL = "".join(f"\\{b:03o}" for b in SSL_REQUEST)  # for printf in a container


@pytest.fixture
def mirror(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test images, as a user's private mirror of the official ones."""
    monkeypatch.setenv("SHIPWAY_ACCESSORY_MIRROR", deployment.env.image_prefix)
    return deployment.env.image_prefix


def a_address(d: Deployment) -> str:
    """Host A's address on the network both hosts share (the root side of B's veth: where
    the registry listens), which B reaches A at."""
    return d.env.registry.split(":", 1)[0]


def write(
    d: Deployment, *, kind: str = "postgres", version: str = "15", extra: str = "", where: str = ""
) -> None:
    link = "DATABASE_URL" if kind == "postgres" else "REDIS_URL"
    d.hosts = [d.env.a, d.env.b]
    d.spec_file.write_text(
        f"""
[app]
name = "{d.name}"
image = "{d.env.images.v1}"
{extra}
{WEB}
[accessories.db]
kind = "{kind}"
version = "{version}"
{where}

[secrets]
{link} = {{ from_accessory = "db" }}

[slots.{SLOT}]
backend = "docker"
hosts = [{{ url = "{d.env.a.url}", address = "{a_address(d)}" }}, "{d.env.b.url}"]
proxy_image = "{d.env.images.proxy}"
proxy_port = {d.port}
drain_timeout = "1s"
"""
    )


def accessory(d: Deployment) -> Any:
    client = d.local(d.env.a)
    try:
        return client.containers.get(f"shipway-{d.name}-{SLOT}-acc-db")
    finally:
        client.close()


def volume_labels(d: Deployment) -> dict[str, str] | None:
    client = d.local(d.env.a)
    try:
        found = client.volumes.list(filters={"name": f"shipway-{d.name}-{SLOT}-acc-db-data"})
        return dict(found[0].attrs.get("Labels") or {}) if found else None
    finally:
        client.close()


def ssl_answer(address: str, port: int) -> bytes:
    with socket.create_connection((address, port), timeout=5) as sock:
        sock.sendall(SSL_REQUEST)
        return sock.recv(1)


def test_a_postgres_accessory_is_published_on_its_hosts_address_only_and_outlives_the_app(
    deployment: Deployment, mirror: str
) -> None:
    d = deployment
    write(d)
    app = d.app()
    plan = api.plan(app, SLOT)
    assert "create accessory db (postgres 15)" in "\n".join(plan.describe())

    lines = Lines()
    outcome = d.deploy(lines)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()
    assert "accessory db (postgres 15) answers on" in lines.text()

    c = accessory(d)
    [binding] = c.attrs["HostConfig"]["PortBindings"]["5432/tcp"]
    address, port = binding["HostIp"], int(binding["HostPort"])
    assert address == a_address(d)
    assert c.attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert c.attrs["Config"]["Image"] == f"{mirror}/postgres:15"
    # published on A's address, and on no other interface of A (127.0.0.1 is one)
    assert ssl_answer(address, port) == b"N"
    with pytest.raises(ConnectionRefusedError):
        ssl_answer("127.0.0.1", port)

    # the app on both hosts got the link to it, and B's container reaches it there
    creds = volume_labels(d)
    assert creds is not None
    password = creds["org.shipway.accessory.password"]
    for host in (d.env.a, d.env.b):
        status, env = d.get(host, "/cgi-bin/env")
        assert status == 200
        assert f"DATABASE_URL=postgresql://shipway:{password}@{address}:{port}/{d.name}" in env
    [web_b] = d.containers(d.env.b, process="web")
    ask = f"printf '{SSL_REQUEST_OCTAL}' | nc -w 3 {address} {port}"
    _, asked = run_in(web_b, ["sh", "-c", ask])
    assert asked[:1] == b"N", asked

    # an app deploy (forced: every container replaced) leaves the accessory alone
    started = c.attrs["State"]["StartedAt"]
    lines = Lines()
    outcome = d.deploy(lines, force=True)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()
    again = accessory(d)
    assert (again.id, again.attrs["State"]["StartedAt"]) == (c.id, started)
    assert "accessory" not in lines.text()
    # ... and so do a rollback and a restart of the app
    outcome = api.rollback(d.app(), SLOT, 1, reporter=lines)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()
    outcome = api.restart(d.app(), SLOT, reporter=lines)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()
    again = accessory(d)
    assert (again.id, again.attrs["State"]["StartedAt"]) == (c.id, started)

    status = api.status(d.app(), SLOT)
    [shown] = status.accessories
    assert (shown.name, shown.kind, shown.version, shown.state, shown.healthy) == (
        "db", "postgres", "15", "running", True,
    )  # fmt: skip
    assert shown.address == f"{address}:{port}" and str(shown.host) in d.env.a.url
    shown_json = json.dumps(status.to_json())
    for text in ("\n".join(plan.describe()), lines.text(), shown_json, json.dumps(plan.to_json())):
        assert password not in text

    # destroy keeps its data and credentials; destroy --volumes deletes them
    gone = api.destroy(d.app(), SLOT, confirm=SLOT, reporter=Lines())
    assert any(g.kind == "accessory" for g in gone)
    with pytest.raises(docker.errors.NotFound):
        accessory(d)
    assert volume_labels(d) == creds
    lines = Lines()
    outcome = d.deploy(lines)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()
    assert volume_labels(d) == creds  # the same password: the data it was made with
    assert ssl_answer(address, port) == b"N"
    gone = api.destroy(d.app(), SLOT, volumes=True, confirm=SLOT, reporter=Lines())
    assert any(g.kind == "accessory data" and g.data for g in gone)
    assert volume_labels(d) is None


def test_a_redis_accessory_answers_with_its_password_on_host_a(
    deployment: Deployment, mirror: str
) -> None:
    d = deployment
    write(d, kind="redis", version="7")
    lines = Lines()
    outcome = d.deploy(lines)
    assert isinstance(outcome, Rolled), outcome.line() + "\n" + lines.text()
    [shown] = api.status(d.app(), SLOT).accessories
    assert (shown.kind, shown.state, shown.healthy) == ("redis", "running", True)
    creds = volume_labels(d)
    assert creds is not None
    password = creds["org.shipway.accessory.password"]
    host, port = str(shown.address).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        assert sock.recv(64).startswith(b"-NOAUTH")  # a password is required

    # moved to host B, away from its data on A: refused when planned, nothing touched
    write(d, kind="redis", version="7", where=f'host = "{d.env.b.url}"')
    with pytest.raises(InputError) as refused:
        api.plan(d.app(), SLOT)
    assert "does not move an accessory's data" in str(refused.value)
    assert password not in str(refused.value)


def test_an_accessory_on_a_unix_host_without_an_address_in_a_two_host_slot_is_refused(
    deployment: Deployment, mirror: str
) -> None:
    d = deployment
    write(d)
    text = d.spec_file.read_text().replace(f', address = "{a_address(d)}"', "")
    d.spec_file.write_text(text)
    with pytest.raises(InputError) as refused:
        api.plan(d.app(), SLOT)
    message = str(refused.value)
    assert "accessory db runs on" in message and 'address = "' in message
    assert volume_labels(d) is None  # nothing made


def write_release_command(d: Deployment, hosts: str) -> None:
    d.spec_file.write_text(
        f"""
[app]
name = "{d.name}"
image = "{d.env.images.v1}"
release_command = "/app/serve --migrate"
{WEB}
[volumes.data]
path = "www/data"

[slots.{SLOT}]
backend = "docker"
hosts = [{hosts}]
proxy_image = "{d.env.images.proxy}"
proxy_port = {d.port}
"""
    )


def test_a_release_command_writing_a_per_host_volume_on_two_hosts_is_warned_about(
    deployment: Deployment,
) -> None:
    d = deployment
    write_release_command(d, f'"{d.env.a.url}", "{d.env.b.url}"')
    notes = "\n".join(api.plan(d.app(), SLOT).notes)
    assert "warning: the release command (/app/serve --migrate) runs once" in notes
    assert "volume data there only" in notes
    assert "[accessories.db]" in notes and 'from_accessory = "db"' in notes

    write_release_command(d, f'"{d.env.a.url}"')
    notes = "\n".join(api.plan(d.app(), SLOT).notes)
    assert "release command" not in notes
