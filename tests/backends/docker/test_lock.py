"""The slot's lock while it is held, on the real engine: renewal keeps trying through
errors, and once the lock is lost (someone broke it and took it) or was not renewed within
its TTL, every further change is refused with an error naming the slot."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import docker
import pytest

from shipway.backends.docker import labels
from shipway.backends.docker.lock import SlotLock
from shipway.backends.protocol import LockHolder
from shipway.errors import BackendError, LockLost
from shipway.guard import Guard
from shipway.release.artifact import Unit
from tests.backends.docker.conftest import SLOT, Deployment, Lines
from tests.backends.docker.test_interrupt import _plant_lock
from tests.testenv.docker import DockerHost


def wait_until(condition: Callable[[], bool], timeout: float = 20, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.05)


def refused(check: Callable[[], None]) -> bool:
    try:
        check()
    except BackendError:
        return True
    return False


class Relay:
    """A unix socket relaying to a Docker engine's socket, which can be cut (every
    connection closed, new ones hung up on) and restored: an engine that stops answering
    for a while, as seen by one client."""

    def __init__(self, path: Path, engine: str) -> None:
        self.path, self.engine = path, engine
        self.up = threading.Event()
        self.up.set()
        self.open: list[socket.socket] = []
        self.guard = threading.Lock()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if not self.up.is_set():
                conn.close()
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.engine)
            with self.guard:
                self.open += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.up.clear()
        with self.guard:
            for s in self.open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            self.open = []

    def restore(self) -> None:
        self.up.set()

    def close(self) -> None:
        self.cut()
        self.server.close()


@pytest.fixture
def relay(deployment: Deployment, tmp_path: Path) -> Iterator[Relay]:
    engine = deployment.env.a.socket.removeprefix("unix://")
    r = Relay(tmp_path / "relay.sock", engine)
    try:
        yield r
    finally:
        r.close()


def _lock(deployment: Deployment, relay: Relay) -> tuple[SlotLock, docker.DockerClient]:
    client = deployment.local(deployment.env.a)
    renew = docker.DockerClient(base_url=f"unix://{relay.path}", version="auto", timeout=5)
    return SlotLock(client, renew, deployment.name, SLOT, "local"), renew


def test_a_lock_taken_over_while_held_refuses_every_further_change(
    deployment: Deployment,
) -> None:
    env = deployment.env
    app, backend, target, clearance = deployment.on_hosts([env.a])
    r1, r2 = deployment.pending(app, 1), deployment.pending(app, 2)
    unit = Unit(key="container/web.1/x@local", kind="container", host="local", body={})
    lines = Lines()
    with backend.lock(clearance, target, LockHolder.me(ttl=3), lines):
        backend.write_records(clearance, target, [r1])  # ours: allowed
        # another operation finds it expired (say), breaks it and takes the slot
        for c in deployment.containers(env.a, kind="lock"):
            c.remove(force=True)
        _plant_lock(deployment, env.a, since=datetime.now(UTC), ttl=300)
        wait_until(lambda: "lost the lock" in lines.text(), what="the renewal to notice")
        for mutate in (
            lambda: backend.write_records(clearance, target, [r2]),
            lambda: backend.delete_records(clearance, target, [1]),
            lambda: backend.stop(clearance, target, lines),
            lambda: backend.apply(clearance, target, unit, "create", {}, lines),
        ):
            with pytest.raises(BackendError) as err:
                mutate()
            text = str(err.value)
            assert "lock of slot 'test'" in text, text
            assert "another operation may have taken over" in text, text
            assert "held by ci@build-7" in text, text
    assert [r.revision for r in backend.read_records(target)] == [1]  # r2 never written
    (lock,) = deployment.containers(env.a, kind="lock")  # theirs is left alone
    assert lock.labels[labels.LOCK_HOLDER] == "ci@build-7 (pid 4242)"


def test_renewal_keeps_retrying_and_a_stale_lock_refuses_changes(
    deployment: Deployment, relay: Relay
) -> None:
    deployment.write(hosts=[deployment.env.a])
    slot_lock, renew = _lock(deployment, relay)
    lines = Lines()
    with slot_lock.held(LockHolder.me(ttl=3), lines):
        slot_lock.check()
        relay.cut()  # the engine stops answering the renewals
        wait_until(lambda: refused(slot_lock.check), what="the lock to go stale")
        with pytest.raises(BackendError, match="another operation may have taken over"):
            slot_lock.check()
        assert "could not renew the lock of slot 'test'" in lines.text()
        relay.restore()  # ... and answers again: the next renewal succeeds
        wait_until(lambda: not refused(slot_lock.check), what="a renewal after the cut")
        assert "renewed the lock of slot 'test' again" in lines.text()
    assert deployment.containers(deployment.env.a, kind="lock") == []
    renew.close()


def test_a_lock_whose_first_renewal_fails_refuses_every_change_and_is_released(
    deployment: Deployment, relay: Relay
) -> None:
    deployment.write(hosts=[deployment.env.a])
    slot_lock, renew = _lock(deployment, relay)  # connects (version="auto") while up
    relay.cut()
    with slot_lock.held(LockHolder.me(ttl=3), Lines()):
        # the first renewal runs beside the operation's reads; a change waits for it
        with pytest.raises(LockLost) as err:
            slot_lock.check()
        assert "its first renewal failed" in str(err.value), err.value
        assert deployment.containers(deployment.env.a, kind="lock") != []  # held meanwhile
    assert deployment.containers(deployment.env.a, kind="lock") == []
    renew.close()


def test_a_change_waits_for_the_first_renewal_and_finds_its_stamp(
    deployment: Deployment, relay: Relay
) -> None:
    deployment.write(hosts=[deployment.env.a])
    slot_lock, renew = _lock(deployment, relay)
    with slot_lock.held(LockHolder.me(ttl=30), Lines()):
        slot_lock.check()  # returns once the first renewal answered
        found = slot_lock.current()
        assert found is not None
        _, tags, renewed = found
        since = datetime.fromisoformat(tags[labels.LOCK_SINCE])
        assert renewed is not None and renewed > since, (renewed, since)  # the stamp, not `since`
    renew.close()


def test_a_lock_that_cannot_be_released_is_a_warning_not_the_outcome(
    deployment: Deployment, relay: Relay
) -> None:
    env = deployment.env
    # the slot's only host is engine A, reached through the relay
    through = DockerHost("relay", f"unix://{relay.path}", env.a.address, env.a.socket)
    app = deployment.write(hosts=[through])
    backend = deployment.backend()
    target = app.slots.target(SLOT)
    clearance = Guard(app.slots).clear(SLOT)
    lines = Lines()
    with backend.lock(clearance, target, LockHolder.me(ttl=30), lines):
        relay.cut()  # the engine stops answering before the lock is released
    name = labels.lock(deployment.name, SLOT)
    text = lines.text()
    assert "warning: releasing the lock of slot 'test' failed" in text, text
    assert "expires by itself at the latest 30s after its last renewal" in text, text
    assert f"removing the container {name} on host relay" in text, text

    # an operation that failed still ends with its own error, not the unlock's
    relay.restore()
    for c in deployment.containers(env.a, kind="lock"):
        c.remove(force=True)
    lines = Lines()
    with (
        pytest.raises(RuntimeError, match="the operation's own failure"),
        backend.lock(clearance, target, LockHolder.me(ttl=30), lines),
    ):
        relay.cut()
        raise RuntimeError("the operation's own failure")
    assert "warning: releasing the lock of slot 'test' failed" in lines.text()
    backend.close()
