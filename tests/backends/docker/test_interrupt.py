"""The CLI, as real processes: killed or stopped mid-deploy, the records and the lock stay
on the host and the next run resolves them; a lock held by someone alive is refused with
its holder; an expired one is broken, saying whose it was."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from datetime import UTC, datetime, timedelta

from shipway.backends.docker import labels
from shipway.release.model import ReleaseStatus
from tests import cliproc
from tests.backends.docker.conftest import SLOT, Deployment
from tests.testenv.docker import DockerHost

SLOW = """
[processes.web]
port = 8080
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 3000
"""


def cli(deployment: Deployment, *args: str) -> subprocess.Popen[str]:
    return cliproc.ShipwayProcess(
        [sys.executable, "-m", "shipway", "-f", str(deployment.spec_file), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def finish(proc: subprocess.Popen[str], timeout: float = 180) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def wait_until_pending(deployment: Deployment, revision: int, timeout: float = 60) -> None:
    """Until the CLI has written r<revision> as pending (and so holds the lock)."""
    backend = deployment.backend()
    target = deployment.app().slots.target(SLOT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = {r.revision: r.status for r in backend.read_records(target)}
        if records.get(revision) == ReleaseStatus.PENDING:
            return
        time.sleep(0.2)
    raise AssertionError(f"r{revision} never became pending: {records}")


def statuses(deployment: Deployment) -> dict[int, str]:
    backend = deployment.backend()
    target = deployment.app().slots.target(SLOT)
    return {r.revision: str(r.status) for r in backend.read_records(target)}


def test_records_and_lock_survive_a_killed_cli_and_the_next_run_recovers(
    deployment: Deployment,
) -> None:
    env = deployment.env
    first = env.b  # records and lock on a host reached over SSH
    deployment.write(hosts=[first], processes=SLOW)
    code, out = finish(cli(deployment, "deploy", SLOT))
    assert code == 0, out
    # the next release never becomes healthy on its own: it starts listening after 600 s
    deployment.write(hosts=[first], processes=SLOW, extra='[env]\nSTARTUP_DELAY = "600"\n')
    proc = cli(deployment, "deploy", SLOT, "--image", env.images.v2)
    wait_until_pending(deployment, 2)
    proc.send_signal(signal.SIGKILL)
    finish(proc)

    (lock,) = deployment.containers(first, kind="lock")
    assert lock.labels[labels.LOCK_PID] == str(proc.pid)  # the holder is named
    assert statuses(deployment) == {1: "deployed", 2: "pending"}
    assert deployment.get(first) == (200, "v1\n")  # r1 still serves

    deployment.write(hosts=[first], processes=SLOW)
    code, out = finish(cli(deployment, "deploy", SLOT))
    assert code == 0, out
    assert f"(pid {proc.pid})" in out and "broke the lock" in out
    assert f"its process {proc.pid} is gone" in out
    assert "recovering: r2 was left pending" in out
    # r1 re-asserted, it is what the spec says: nothing more to do, no new revision
    assert "no changes" in out
    assert statuses(deployment) == {1: "deployed", 2: "failed"}
    assert deployment.get(first) == (200, "v1\n")
    assert deployment.containers(first, kind="lock") == []
    assert len(deployment.containers(first, kind="app")) == 1  # r2's container was removed


def test_sigterm_marks_the_release_failed_and_releases_the_lock(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a], processes=SLOW, extra='[env]\nSTARTUP_DELAY = "600"\n')
    proc = cli(deployment, "deploy", SLOT)
    wait_until_pending(deployment, 1)
    proc.send_signal(signal.SIGTERM)
    code, out = finish(proc, timeout=60)
    assert code == 143, out
    assert "r1 marked failed" in out
    assert statuses(deployment) == {1: "failed"}
    assert deployment.containers(env.a, kind="lock") == []


def _plant_lock(
    deployment: Deployment,
    host: DockerHost,
    *,
    since: datetime,
    ttl: float,
    holder: dict[str, str] | None = None,
) -> None:
    """A lock as another machine's shipway would leave it (``holder``: other holder labels,
    e.g. this machine's host name and a pid)."""
    client = deployment.local(host)
    try:
        from shipway.backends.docker.records import ensure_holder_image

        ensure_holder_image(client)
        c = client.containers.create(
            labels.HOLDER_IMAGE,
            name=labels.lock(deployment.name, SLOT),
            labels={
                **labels.base(deployment.name, SLOT, labels.LOCK),
                labels.LOCK_HOLDER: "ci@build-7 (pid 4242)",
                labels.LOCK_HOST: "build-7",
                labels.LOCK_PID: "4242",
                labels.LOCK_SINCE: since.isoformat(timespec="seconds"),
                labels.LOCK_TTL: str(ttl),
                **(holder or {}),
            },
        )
        stamp = since.isoformat(timespec="seconds").encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("lock-renewed")
            info.size = len(stamp)
            tar.addfile(info, io.BytesIO(stamp))
        c.put_archive("/", buf.getvalue())
    finally:
        client.close()


def test_a_live_lock_is_refused_and_an_expired_one_broken(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    _plant_lock(deployment, env.a, since=datetime.now(UTC), ttl=300)
    code, out = finish(cli(deployment, "deploy", SLOT))
    assert code == 4, out
    assert "locked by ci@build-7 (pid 4242)" in out and "expires at" in out
    assert deployment.containers(env.a, kind="app") == []  # nothing was touched

    for c in deployment.containers(env.a, kind="lock"):
        c.remove(force=True)
    _plant_lock(deployment, env.a, since=datetime.now(UTC) - timedelta(minutes=5), ttl=60)
    code, out = finish(cli(deployment, "deploy", SLOT))
    assert code == 0, out
    assert "broke the lock of slot 'test' held by ci@build-7 (pid 4242)" in out
    assert "it expired" in out
