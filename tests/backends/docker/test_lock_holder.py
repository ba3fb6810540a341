"""A lock whose holder ran on this machine is broken at once only when its record proves
the holder's process is gone: the same kernel (boot id), the same pid namespace, and no
process with that pid and start time. A host name and a pid alone prove nothing — two
containers can share a host name, each in its own pid namespace."""

from __future__ import annotations

import os
import socket
import subprocess
from datetime import UTC, datetime

from shipway.backends.docker import labels
from shipway.backends.liveness import boot_id, pid_namespace, process_start
from tests.backends.docker.conftest import Deployment
from tests.backends.docker.test_interrupt import _plant_lock, cli, finish


def dead_pid() -> int:
    """A pid no process has any more (it exited, and pids are not reused at once)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def here(pid: int, **marks: str) -> dict[str, str]:
    """Holder labels naming this machine's host name and ``pid``, with its marks."""
    return {
        labels.LOCK_HOLDER: f"ci@{socket.gethostname()} (pid {pid})",
        labels.LOCK_HOST: socket.gethostname(),
        labels.LOCK_PID: str(pid),
        **marks,
    }


def test_a_lock_of_a_same_named_host_in_another_pid_namespace_is_refused(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    pid = dead_pid()
    # another container of this machine, with the same host name: its pid namespace is
    # not ours, so that no process has its pid here says nothing about it
    theirs = here(
        pid,
        **{
            labels.LOCK_BOOT: boot_id(),
            labels.LOCK_PIDNS: "pid:[4026599999]",
            labels.LOCK_START: "12345",
        },
    )
    _plant_lock(deployment, env.a, since=datetime.now(UTC), ttl=300, holder=theirs)
    code, out = finish(cli(deployment, "deploy", "test"))
    assert code == 4, out
    assert f"locked by ci@{socket.gethostname()} (pid {pid})" in out
    assert "broke the lock" not in out
    assert deployment.containers(env.a, kind="app") == []  # nothing was touched


def test_a_lock_recorded_without_process_marks_is_left_to_expire(
    deployment: Deployment,
) -> None:
    # host name and pid only (an older record): the pid may be another namespace's
    env = deployment.env
    deployment.write(hosts=[env.a])
    pid = dead_pid()
    _plant_lock(deployment, env.a, since=datetime.now(UTC), ttl=300, holder=here(pid))
    code, out = finish(cli(deployment, "deploy", "test"))
    assert code == 4, out
    assert "broke the lock" not in out


def test_a_lock_whose_pid_now_belongs_to_another_process_is_broken(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    me = os.getpid()  # a live process of this machine, this namespace ...
    assert process_start(me) != "1"
    stale = here(
        me,
        **{
            labels.LOCK_BOOT: boot_id(),
            labels.LOCK_PIDNS: pid_namespace(),
            labels.LOCK_START: "1",  # ... which is not the process that took the lock
        },
    )
    _plant_lock(deployment, env.a, since=datetime.now(UTC), ttl=300, holder=stale)
    code, out = finish(cli(deployment, "deploy", "test"))
    assert code == 0, out
    assert f"broke the lock of slot 'test' held by ci@{socket.gethostname()} (pid {me})" in out
    assert f"its process {me} is gone from this machine (that pid now belongs" in out
