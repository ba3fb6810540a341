"""A slot whose local Docker socket does not exist fails at once (exit 1), naming the
socket and what to do: a missing socket is not a transient fault, so it is never retried
and never shown in docker-py's words."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from shipway.cli.main import cli
from tests.backends.docker.conftest import Deployment


def test_a_missing_socket_fails_at_once_naming_it(deployment: Deployment, tmp_path: Path) -> None:
    deployment.write(hosts=[deployment.env.a])
    missing = tmp_path / "run" / "docker.sock"
    text = deployment.spec_file.read_text().replace(deployment.env.a.url, f"unix://{missing}")
    deployment.spec_file.write_text(text)
    for command in (["status", "test"], ["plan", "test"]):
        started = time.monotonic()
        result = CliRunner().invoke(cli, ["-f", str(deployment.spec_file), *command])
        took = time.monotonic() - started
        out = result.output
        assert result.exit_code == 1, out
        assert f"no Docker socket at {missing}" in out, out
        assert "hint: start the Docker engine" in out, out
        assert "retrying" not in out and "FileNotFoundError" not in out, out
        assert "fetching server API version" not in out, out
        assert took < 2.0, took  # no backoff between attempts


def test_a_path_that_is_not_a_socket_is_said_so(deployment: Deployment, tmp_path: Path) -> None:
    deployment.write(hosts=[deployment.env.a])
    plain = tmp_path / "docker.sock"
    plain.write_text("not a socket\n")
    text = deployment.spec_file.read_text().replace(deployment.env.a.url, f"unix://{plain}")
    deployment.spec_file.write_text(text)
    result = CliRunner().invoke(cli, ["-f", str(deployment.spec_file), "status", "test"])
    assert result.exit_code == 1, result.output
    assert f"{plain} is not a socket" in result.output, result.output
    assert "retrying" not in result.output


def test_a_missing_build_engine_socket_is_said_so(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = deployment
    d.write(image=f"{d.env.image_prefix}/{d.name}", hosts=[d.env.a])
    (d.dir / "Dockerfile").write_text("FROM scratch\n")
    missing = tmp_path / "nowhere" / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{missing}")
    result = CliRunner().invoke(cli, ["-f", str(d.spec_file), "build", "test"])
    assert result.exit_code == 1, result.output
    assert f"the build engine (DOCKER_HOST): no Docker socket at {missing}" in result.output
    assert "in DOCKER_HOST or [build] host" in result.output
    assert "FileNotFoundError" not in result.output, result.output


def test_a_socket_gone_mid_operation_is_not_retried() -> None:
    """The same error docker-py raises when the socket file is missing: not transient; a
    refused connection (an engine restarting behind its socket) still is."""
    import requests
    import urllib3.exceptions

    from shipway.backends.docker.retrying import connection_fault

    def aborted(cause: OSError) -> requests.exceptions.ConnectionError:
        return requests.exceptions.ConnectionError(
            urllib3.exceptions.ProtocolError("Connection aborted.", cause)
        )

    missing = aborted(FileNotFoundError(2, "No such file or directory"))
    refused = aborted(ConnectionRefusedError(111, "Connection refused"))
    assert connection_fault(missing) is None
    assert connection_fault(refused) is not None
