"""SSH host keys: an unknown host is refused with its fingerprint and how to trust it; a
changed key is refused loudly; nothing is ever added to a known_hosts file."""

from __future__ import annotations

import base64
import hashlib
import os
import sys
from pathlib import Path

import paramiko
import pytest

from shipway import api
from shipway.errors import HostKeyMismatch, UnknownHostKey
from tests import cliproc
from tests.backends.docker.conftest import SLOT, Deployment


def real_fingerprint(known_hosts: Path, host: str) -> tuple[str, str]:
    """(key type, OpenSSH SHA256 fingerprint) of ``host``'s key, computed independently."""
    for line in known_hosts.read_text().splitlines():
        name, kind, blob = line.split()[:3]
        if name == host:
            digest = hashlib.sha256(base64.b64decode(blob)).digest()
            return kind, "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
    raise AssertionError(f"{host} not in {known_hosts}")


def test_unknown_host_key_is_refused_with_fingerprint_and_how_to_trust_it(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = deployment.env
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    monkeypatch.setenv("SHIPWAY_KNOWN_HOSTS", str(empty))
    deployment.write(hosts=[env.a, env.b])
    kind, fingerprint = real_fingerprint(env.known_hosts, env.b.address)
    with pytest.raises(UnknownHostKey) as exc:
        deployment.deploy()
    message = str(exc.value)
    assert fingerprint in message and kind in message
    assert f"ssh-keyscan -t {kind} {env.b.address} >> {empty}" in message
    assert "ssh-keygen -lf" in message  # how to check it on the host itself
    assert empty.read_text() == ""  # never auto-accepted
    # refused before anything ran on either host (the lock on A was released)
    for host in (env.a, env.b):
        assert [
            c for c in deployment.containers(host) if c.labels["org.shipway.kind"] != "record"
        ] == []


def test_changed_host_key_is_refused_loudly(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = deployment.env
    impostor = paramiko.Ed25519Key.from_private_key_file(str(env.ssh_key))  # not B's key
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{env.b.address} {impostor.get_name()} {impostor.get_base64()}\n")
    monkeypatch.setenv("SHIPWAY_KNOWN_HOSTS", str(wrong))
    deployment.write(hosts=[env.b])
    _, fingerprint = real_fingerprint(env.known_hosts, env.b.address)
    with pytest.raises(HostKeyMismatch) as exc:
        api.plan(deployment.app(), SLOT)
    assert "HOST KEY MISMATCH" in str(exc.value)
    assert fingerprint in str(exc.value)


def test_slot_known_hosts_setting_is_used(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = deployment.env
    monkeypatch.delenv("SHIPWAY_KNOWN_HOSTS")
    deployment.write(hosts=[env.b], slot_extra=f'known_hosts = "{env.known_hosts}"')
    plan = api.plan(deployment.app(), SLOT)
    assert plan.release is not None and plan.steps


def test_cli_refusal_exit_code_and_message(deployment: Deployment, tmp_path: Path) -> None:
    env = deployment.env
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    deployment.write(hosts=[env.b])
    proc = cliproc.run(
        [sys.executable, "-m", "shipway", "-f", str(deployment.spec_file), "plan", SLOT],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SHIPWAY_KNOWN_HOSTS": str(empty)},
    )
    assert proc.returncode == 1
    _, fingerprint = real_fingerprint(env.known_hosts, env.b.address)
    assert fingerprint in proc.stderr and "ssh-keyscan" in proc.stderr
    assert "Traceback" not in proc.stderr
