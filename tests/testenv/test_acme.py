"""The test ACME CA (Pebble) and the test proxy's Caddy: a real ACME order by HTTP-01.

Caddy (the test proxy image) runs on a test host, driven only through its admin API: it is given
a site for a name under ``SHIPWAY_TEST_ACME_DOMAIN`` with the test directory as its ACME
issuer (trusting the directory's own listener CA, nothing else). It orders a certificate,
Pebble resolves the name to that host (host A: every name of the domain; host B: a name
pointed there through the CA's DNS) and fetches the HTTP-01 token from the port it checks,
and a client that trusts ONLY ``SHIPWAY_TEST_ACME_ROOT`` then verifies the chain Caddy serves.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import ssl
import tarfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest
from docker.models.containers import Container

from tests.testenv import ports
from tests.testenv.acme import AcmeEnv, challenge_port
from tests.testenv.docker import TEST_LABEL, DockerEnv, DockerHost


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@contextlib.contextmanager
def caddy_on(
    env: DockerEnv, host: DockerHost, acme: AcmeEnv, http_port: int
) -> Iterator[tuple[Container, int, int]]:
    """The test proxy image on ``host``: HTTP on the CA's challenge port, HTTPS and the
    admin API on ports of this test's own; (container, https port, admin port)."""
    https, admin = ports.free_port("0.0.0.0"), ports.free_port("0.0.0.0")
    client = env.local_client(host)
    name = f"shipway-testenv-acme-{uuid.uuid4().hex[:8]}"
    client.images.pull(env.images.proxy)
    container = client.containers.create(
        env.images.proxy,
        ["caddy", "run"],
        name=name,
        environment={"CADDY_ADMIN": "0.0.0.0:2019"},
        ports={"80/tcp": http_port, "443/tcp": https, "2019/tcp": admin},
        labels={TEST_LABEL: "1"},
    )
    try:
        container.put_archive("/etc/shipway", _tar({"acme-ca.pem": acme.directory_ca.read_bytes()}))
        container.start()
        yield container, https, admin
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
        client.close()


def load(address: str, admin: int, config: dict[str, Any]) -> None:
    """POST the whole config to Caddy's admin API (once it listens). The answer may take
    seconds on a loaded machine: Caddy provisions the ACME issuer before it answers."""
    deadline = time.monotonic() + 30
    while True:
        request = urllib.request.Request(
            f"http://{address}:{admin}/load",
            data=json.dumps(config).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                assert answer.status == 200
                return
        except (ConnectionError, urllib.error.URLError) as exc:
            if isinstance(exc, urllib.error.HTTPError) or time.monotonic() > deadline:
                raise


def site(name: str, acme: AcmeEnv) -> dict[str, Any]:
    return {
        "apps": {
            "http": {
                "servers": {
                    "site": {
                        "listen": [":443"],
                        "routes": [
                            {
                                "match": [{"host": [name]}],
                                "handle": [{"handler": "static_response", "body": "hello\n"}],
                            }
                        ],
                    }
                }
            },
            "tls": {
                "automation": {
                    "policies": [
                        {
                            "subjects": [name],
                            "issuers": [
                                {
                                    "module": "acme",
                                    "ca": acme.directory,
                                    "trusted_roots_pem_files": ["/etc/shipway/acme-ca.pem"],
                                    "challenges": {"tls-alpn": {"disabled": True}},
                                }
                            ],
                        }
                    ]
                }
            },
        }
    }


def served(address: str, port: int, name: str, root: str) -> tuple[dict[str, Any], str] | None:
    """(peer certificate, body) of GET / over TLS to ``name`` on host A, verified against
    ``root`` only; None while the handshake fails (no certificate yet)."""
    context = ssl.create_default_context(cafile=root)  # that file only, no system roots
    try:
        with (
            socket.create_connection((address, port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=name) as tls,
        ):
            tls.sendall(f"GET / HTTP/1.0\r\nHost: {name}\r\n\r\n".encode())
            data = b""
            while chunk := tls.recv(4096):
                data += chunk
            cert = tls.getpeercert()
    except (ssl.SSLError, OSError):
        return None
    assert cert is not None
    return cert, data.decode().split("\r\n\r\n", 1)[-1]


@contextlib.contextmanager
def name_on(acme: AcmeEnv, host: DockerHost) -> Iterator[str]:
    """A fresh name under the test domain that the CA resolves to ``host`` (host A: every
    name; host B: pointed there through the CA's DNS, and back after)."""
    name = f"t{uuid.uuid4().hex[:8]}.{acme.domain}"
    if host.name == "a":
        yield name
        return
    dns(acme, "add-a", {"host": name, "addresses": [host.address]})
    try:
        yield name
    finally:
        dns(acme, "clear-a", {"host": name})


def dns(acme: AcmeEnv, verb: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        f"{acme.dns_management}/{verb}", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


@pytest.mark.parametrize("which", ["a", "b"])
def test_caddy_on_a_test_host_gets_a_certificate_from_the_test_ca_by_http01(
    docker_env: DockerEnv, acme_env: AcmeEnv, which: str
) -> None:
    host = docker_env.a if which == "a" else docker_env.b
    with (
        name_on(acme_env, host) as name,
        challenge_port(acme_env) as http_port,
        caddy_on(docker_env, host, acme_env, http_port) as (container, https, admin),
    ):
        load(host.address, admin, site(name, acme_env))
        deadline = time.monotonic() + 90
        got = None
        while got is None and time.monotonic() < deadline:
            got = served(host.address, https, name, str(acme_env.root))
            if got is None:
                time.sleep(0.5)
        logs = container.logs().decode(errors="replace")
        assert got is not None, f"no certificate for {name} verified by the root:\n{logs[-4000:]}"
        # a client trusting anything but the test root refuses the chain
        assert served(host.address, https, name, str(acme_env.directory_ca)) is None
    cert, body = got
    assert body == "hello\n"
    assert ("DNS", name) in cert["subjectAltName"]
    issuer = dict(item[0] for item in cert["issuer"])
    assert issuer["commonName"].startswith("Pebble Intermediate CA"), issuer
    assert '"challenge_type":"http-01"' in logs, logs[-4000:]
