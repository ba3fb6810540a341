"""The release command on the Docker hosts: a hanging one is stopped at its timeout (the
spec's ``release_timeout``) and its container removed; one left running by a run killed
with SIGKILL is removed by the next run before it starts its own — never two at once."""

from __future__ import annotations

import signal
import time

from shipway.engine import NoAnchor
from tests.backends.docker.conftest import Deployment, Lines
from tests.backends.docker.test_interrupt import cli, finish


def with_release(deployment: Deployment, command: str, timeout: str | None = None) -> None:
    text = deployment.spec_file.read_text()
    extra = f'release_command = ["sh", "-c", "{command}"]\n'
    if timeout is not None:
        extra += f'release_timeout = "{timeout}"\n'
    deployment.spec_file.write_text(text.replace("[app]\n", "[app]\n" + extra, 1))


def test_a_hanging_release_command_is_stopped_at_its_timeout(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    with_release(deployment, "echo started; sleep 600", timeout="2s")
    lines = Lines()
    started = time.monotonic()
    outcome = deployment.deploy(lines)
    took = time.monotonic() - started
    assert isinstance(outcome, NoAnchor), outcome.line()  # nothing ran before: nothing new
    failure = outcome.failure
    assert failure.reason == "ReleaseCommandTimeout", failure
    assert "release_timeout (2s)" in failure.message
    assert took < 60, f"the deploy took {took:.0f}s"
    assert (
        "run the release command, before any new process starts: sh -c echo started; "
        "sleep 600 (stopped after 2s)"
    ) in lines.text()
    assert deployment.containers(env.a, kind="release-command") == []  # killed and removed


def test_a_release_command_left_by_a_killed_run_is_removed_by_the_next(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    with_release(deployment, "sleep 600")
    proc = cli(deployment, "deploy", "test")
    deadline = time.monotonic() + 60
    while not [
        c for c in deployment.containers(env.a, kind="release-command") if c.status == "running"
    ]:
        assert time.monotonic() < deadline, "the release command never started"
        assert proc.poll() is None, finish(proc)
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)  # no handler runs: the container is left running
    finish(proc)
    (orphan,) = deployment.containers(env.a, kind="release-command")
    assert orphan.status == "running"

    deployment.write(hosts=[env.a])
    with_release(deployment, "echo migrated")
    code, out = finish(cli(deployment, "deploy", "test"))
    assert code == 0, out
    assert f"removed the release command container {orphan.name} (running) on docker-a" in out
    assert "left by an earlier run" in out
    assert "release command: migrated" in out
    assert deployment.containers(env.a, kind="release-command") == []
