"""pytest plugin: the test ACME CA of ``scripts/docker-testenv`` (Pebble, Let's Encrypt's
test CA, and its DNS, pebble-challtestsrv).

The session fixture ``acme_env`` reads the ``SHIPWAY_TEST_ACME_*`` variables ``env`` prints;
when one is missing or the directory does not answer, it runs ``docker-testenv up`` once
(root only: an environment started before Pebble was added gets it then).

Pebble checks an HTTP-01 challenge on port ``http_port`` of the address the name resolves
to (every name resolves to host A), so two tests answering challenges on host A at once
would take the same port: :func:`challenge_port` serializes them across pytest workers.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from tests.testenv.docker import SCRIPT, _parse_exports

_VARS = (
    "SHIPWAY_TEST_ACME_DIRECTORY",
    "SHIPWAY_TEST_ACME_DIRECTORY_CA",
    "SHIPWAY_TEST_ACME_ROOT",
    "SHIPWAY_TEST_ACME_DOMAIN",
    "SHIPWAY_TEST_ACME_HTTP_PORT",
    "SHIPWAY_TEST_ACME_TLS_PORT",
    "SHIPWAY_TEST_ACME_DNS_MANAGEMENT",
)


@dataclass(frozen=True)
class AcmeEnv:
    #: the directory URL, as the test hosts' containers reach it (HTTPS)
    directory: str
    #: PEM of the CA of the directory's own HTTPS listener (a client of the directory
    #: trusts it; it issues nothing else)
    directory_ca: Path
    #: PEM of the root that issues the CA's certificates (new on each start of Pebble)
    root: Path
    #: a domain whose names (it and every subdomain) resolve to host A in the CA's view
    domain: str
    #: the port on that address where the CA checks HTTP-01 / TLS-ALPN-01 challenges
    http_port: int
    tls_port: int
    #: the CA's DNS server's management API (``POST /add-a``: a name to another address)
    dns_management: str

    @classmethod
    def from_environ(cls, env: dict[str, str]) -> AcmeEnv:
        return cls(
            directory=env["SHIPWAY_TEST_ACME_DIRECTORY"],
            directory_ca=Path(env["SHIPWAY_TEST_ACME_DIRECTORY_CA"]),
            root=Path(env["SHIPWAY_TEST_ACME_ROOT"]),
            domain=env["SHIPWAY_TEST_ACME_DOMAIN"],
            http_port=int(env["SHIPWAY_TEST_ACME_HTTP_PORT"]),
            tls_port=int(env["SHIPWAY_TEST_ACME_TLS_PORT"]),
            dns_management=env["SHIPWAY_TEST_ACME_DNS_MANAGEMENT"],
        )

    def answers(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.directory_ca))
        try:
            with urllib.request.urlopen(self.directory, timeout=5, context=context) as r:
                return r.status == 200
        except OSError:
            return False


def ensure_acme_env() -> AcmeEnv:
    if all(v in os.environ for v in _VARS):
        env = AcmeEnv.from_environ(dict(os.environ))
        if env.answers():
            return env
    if os.geteuid() != 0:
        pytest.fail(
            f"the test ACME CA is not up and only root can start it: run `sudo {SCRIPT} up`"
        )
    proc = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"{SCRIPT} up failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out = subprocess.run([str(SCRIPT), "env"], check=True, capture_output=True, text=True).stdout
    exports = _parse_exports(out)
    os.environ.update(exports)
    return AcmeEnv.from_environ(exports)


@pytest.fixture(scope="session")
def acme_env() -> AcmeEnv:
    return ensure_acme_env()


@contextmanager
def challenge_port(env: AcmeEnv) -> Iterator[int]:
    """Host A's challenge port, held by this test alone while the block runs."""
    with FileLock(f"/tmp/shipway-test-acme-{env.http_port}.lock"):
        yield env.http_port
