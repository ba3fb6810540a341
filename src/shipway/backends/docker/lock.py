"""The slot's lock, kept on the slot's first host (beside the records, :mod:`.records`).

The lock is the container named ``shipway-<app>-<slot>-lock``, made from the holder image
and never started: container names are unique, so creating it is the atomic "take". Its
labels name the holder (user, machine, pid), since when, and for how long; a file inside
it (``put_archive``) holds the time of the last renewal, rewritten by a thread while held.
An expired lock — or one whose holder process is provably gone from this very machine (its
boot id, pid namespace, pid and start time, :mod:`~shipway.backends.liveness`) — is broken
with a line naming the holder. Once it is lost (or not renewed within its TTL), every
further mutation is refused.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from shipway.backends.docker import labels
from shipway.backends.docker.edge import edge
from shipway.backends.docker.records import holder_made, read_tree, tar_of
from shipway.backends.docker.state import DockerState
from shipway.backends.liveness import ProcessMark
from shipway.backends.protocol import LockHolder, Reporter
from shipway.backends.retry import RetryPolicy
from shipway.errors import BackendError, LockLost, SlotLocked
from shipway.guard import Clearance
from shipway.spec.model import Target

RENEWED_FILE = "lock-renewed"


def _parse_time(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class SlotLock:
    """The lock of one slot: take, renew in a thread while held, release on every exit."""

    def __init__(
        self,
        client: docker.DockerClient,
        renew_client: docker.DockerClient,
        app: str,
        slot: str,
        host_name: str,
    ) -> None:
        self.client, self.renew_client = client, renew_client
        self.app, self.slot, self.host_name = app, slot, host_name
        self.name = labels.lock(app, slot)
        self._state = threading.Lock()
        #: why the lock is no longer ours (set by the renewal thread), None while it is
        self.lost: str | None = None
        #: time.monotonic() of the start of the last successful renewal (None: not held)
        self.renewed_at: float | None = None
        self.ttl = 60.0
        #: set once the first renewal after the take has answered (or failed)
        self._first = threading.Event()
        self._first.set()  # not held: nothing to wait for

    def _labels(self, holder: LockHolder) -> dict[str, str]:
        return {
            **labels.base(self.app, self.slot, labels.LOCK),
            labels.LOCK_HOLDER: holder.holder,
            labels.LOCK_HOST: holder.host,
            labels.LOCK_PID: str(holder.pid),
            labels.LOCK_SINCE: holder.since,
            labels.LOCK_TTL: str(holder.ttl),
            labels.LOCK_BOOT: holder.boot,
            labels.LOCK_PIDNS: holder.pid_ns,
            labels.LOCK_START: holder.start,
        }

    def current(self) -> tuple[Container, dict[str, str], datetime | None] | None:
        """The lock container, its labels and when it was last renewed (None: free)."""
        try:
            container = self.client.containers.get(self.name)
        except docker.errors.NotFound:
            return None
        tags: dict[str, str] = container.labels
        renewed = read_tree(container, "/" + RENEWED_FILE).get(RENEWED_FILE)
        when = _parse_time(renewed[0].decode().strip()) if renewed else None
        return container, tags, when or _parse_time(tags.get(labels.LOCK_SINCE, ""))

    def _breakable(self, tags: dict[str, str], renewed: datetime | None) -> str | None:
        """Why the lock may be taken over (None: it may not)."""
        try:
            ttl = float(tags.get(labels.LOCK_TTL, "60"))
        except ValueError:
            ttl = 60.0
        now = datetime.now(UTC)
        if renewed is None or renewed + timedelta(seconds=ttl) <= now:
            return "it expired"
        try:
            pid = int(tags.get(labels.LOCK_PID, ""))
        except ValueError:
            return None
        # host and pid alone prove nothing (two containers may share a host name, each in
        # its own pid namespace): the mark says whether the holder ran on this very kernel
        mark = ProcessMark(
            host=tags.get(labels.LOCK_HOST, ""),
            pid=pid,
            boot=tags.get(labels.LOCK_BOOT, ""),
            pid_ns=tags.get(labels.LOCK_PIDNS, ""),
            start=tags.get(labels.LOCK_START, ""),
        )
        return mark.gone()

    def _take(self, holder: LockHolder, reporter: Reporter) -> str:
        """The id of the lock container this call made (the create's answer: not inspected)."""
        for _ in range(5):
            try:
                made = holder_made(
                    self.client,
                    lambda: self.client.api.create_container(
                        labels.HOLDER_IMAGE, name=self.name, labels=self._labels(holder)
                    ),
                )
                return str(made["Id"])
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
            found = self.current()
            if found is None:
                continue  # released meanwhile: try again
            container, tags, renewed = found
            why = self._breakable(tags, renewed)
            who, since = tags.get(labels.LOCK_HOLDER, "?"), tags.get(labels.LOCK_SINCE, "?")
            if why is None:
                ttl = float(tags.get(labels.LOCK_TTL, "60") or 60)
                expires = (
                    (renewed + timedelta(seconds=ttl)).isoformat(timespec="seconds")
                    if (renewed)
                    else None
                )
                raise SlotLocked(
                    self.slot, f"{who} (lock on host {self.host_name})", since, expires
                )
            reporter.line(
                f"broke the lock of slot {self.slot!r} held by {who} since {since}: {why}"
            )
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.remove_container(str(container.id), force=True)
        raise BackendError(f"could not take the lock of slot {self.slot!r}: it kept changing hands")

    def _renew(self, container_id: str, holder: LockHolder) -> None:
        """Rewrite the renewal stamp into the lock container this operation made, by its id:
        a lock broken and taken by someone else is another container, and the write finds
        none (raises :class:`LockLost`, saying who holds it now) — one call a renewal."""
        stamp = datetime.now(UTC).isoformat().encode()  # microseconds: no rounding down
        try:
            self.renew_client.api.put_archive(
                container_id, "/", tar_of({RENEWED_FILE: (stamp, 0o644)})
            )
        except docker.errors.NotFound as exc:
            raise LockLost(self._lost(container_id, holder)) from exc

    def _lost(self, container_id: str, holder: LockHolder) -> str:
        """Why the lock is not ours any more, once its container (by id) is gone."""
        try:
            found: dict[str, Any] = self.renew_client.api.inspect_container(self.name)
        except docker.errors.NotFound:
            return "its lock container was removed"
        tags: dict[str, Any] = found["Config"]["Labels"] or {}
        if (
            str(found["Id"]) != container_id
            or tags.get(labels.LOCK_PID) != str(holder.pid)
            or tags.get(labels.LOCK_SINCE) != holder.since
        ):
            who = tags.get(labels.LOCK_HOLDER, "?")
            return f"it is now held by {who} since {tags.get(labels.LOCK_SINCE, '?')}"
        return "its lock container was removed"

    def check(self) -> None:
        """Raise LockLost unless the lock is still ours and was renewed within its TTL
        (what every mutation under the lock checks first)."""
        # the first renewal runs beside the operation's first reads; no change before it
        # has answered (a lock that cannot be renewed is not held for long)
        self._first.wait(timeout=self.ttl)
        with self._state:
            lost, renewed, ttl = self.lost, self.renewed_at, self.ttl
        if lost is None and not self._first.is_set():
            lost = f"its first renewal did not answer within its TTL ({ttl:g}s)"
        if lost is None and renewed is not None and time.monotonic() - renewed > ttl:
            lost = (
                f"its last successful renewal was {time.monotonic() - renewed:.0f}s ago, "
                f"longer than its TTL ({ttl:g}s)"
            )
        if lost is not None:
            if "now held by" not in lost:
                lost += self._held_now()
            raise LockLost(
                f"the lock of slot {self.slot!r} (on host {self.host_name}) is no longer held: "
                f"{lost}; another operation may have taken over the slot, so shipway refuses "
                "to change anything more (check `shipway status`, then run again)"
            )

    def _held_now(self) -> str:
        """Who holds the slot's lock now (said once ours is lost: the renewal may have
        seen ours removed before the other operation's was made)."""
        try:
            tags = self.client.api.inspect_container(self.name)["Config"]["Labels"] or {}
        except docker.errors.DockerException:
            return ""
        who = tags.get(labels.LOCK_HOLDER, "?")
        return f"; it is now held by {who} since {tags.get(labels.LOCK_SINCE, '?')}"

    @contextlib.contextmanager
    def held(self, holder: LockHolder, reporter: Reporter) -> Iterator[None]:
        # until the first renewal, others count the TTL from the holder's `since` label
        since = _parse_time(holder.since) or datetime.now(UTC)
        taken_at = time.monotonic() - max((datetime.now(UTC) - since).total_seconds(), 0.0)
        container_id = self._take(holder, reporter)
        stop = threading.Event()
        with self._state:
            self.lost, self.renewed_at, self.ttl = None, taken_at, holder.ttl

        def renew_once() -> None:
            started = time.monotonic()  # the stamp written is no earlier than this
            self._renew(container_id, holder)
            with self._state:
                self.renewed_at = started

        def renew_loop() -> None:
            interval = max(holder.ttl / 3, 0.5)
            failing = False
            while not stop.wait(interval):
                try:
                    renew_once()
                except LockLost as exc:
                    with self._state:
                        self.lost = str(exc)
                    reporter.line(f"warning: lost the lock of slot {self.slot!r}: {exc}")
                    return  # someone else's now: nothing left to renew
                except Exception as exc:  # the engine or the connection: retried next tick
                    if not failing:
                        reporter.line(
                            f"warning: could not renew the lock of slot {self.slot!r} "
                            f"(retrying every {interval:g}s): {exc}"
                        )
                    failing = True
                    continue
                if failing:
                    reporter.line(f"renewed the lock of slot {self.slot!r} again")
                failing = False

        def first_then_loop() -> None:
            try:
                renew_once()
            except Exception as exc:  # any failure: the lock is not to be used
                with self._state:
                    self.lost = f"its first renewal failed: {exc}"
                return
            finally:
                self._first.set()
            renew_loop()

        # the first renewal (a stamp written, proving the renewal path works) is made by the
        # thread at once, while the operation reads; check() waits for it before a change
        self._first.clear()
        thread = threading.Thread(target=first_then_loop, name="shipway-lock-renewal", daemon=True)
        try:
            thread.start()
            yield
        finally:
            stop.set()
            if thread.is_alive():
                thread.join(timeout=10)
            self._release(container_id, holder)

    def _release(self, container_id: str, holder: LockHolder) -> None:
        try:
            tags: dict[str, Any] = (
                self.client.api.inspect_container(container_id)["Config"]["Labels"] or {}
            )
        except docker.errors.NotFound:
            return  # broken by someone after it expired: nothing of ours to release
        if (
            tags.get(labels.LOCK_PID) == str(holder.pid)
            and tags.get(labels.LOCK_SINCE) == holder.since
        ):
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.remove_container(container_id, force=True)


class DockerLock(DockerState):
    """The backend's ``lock()``: holds the :class:`SlotLock` for the operation's block, and
    at its end (after a failure) says what happened on each host."""

    @contextlib.contextmanager
    def lock(
        self, clearance: Clearance, target: Target, holder: LockHolder, reporter: Reporter
    ) -> Iterator[None]:
        self._guard(clearance, target)
        self._listed.clear()
        self._forget_looks()
        self._record_index = None
        self._connect_others()  # while the lock is taken, the other hosts connect
        conn = self._conn(self.primary)
        if self.retry.reporter is None:
            self.retry.reporter = reporter
        # the renewing thread's retries fit in one renewal interval: a renewal that keeps
        # failing is tried afresh at the next tick, not piled up behind the lock's TTL
        interval = max(holder.ttl / 3, 0.5)
        renewing = RetryPolicy(budget=interval, cap=interval / 2)
        renewing.reporter = self.retry.reporter
        with edge(f"host {self.primary}: lock"):
            slot_lock = SlotLock(
                conn.client(),
                conn.new_client(renewing),
                self.app.name,
                self.slot.name,
                self.primary,
            )
            held = slot_lock.held(holder, reporter)
            held.__enter__()
        self.journal, self._trouble = {}, False
        self._slot_lock = slot_lock
        try:
            yield
        except BaseException:
            self._slot_lock = self._record_index = None
            self._forget_looks()
            self._trouble = True
            self._final_report(reporter)
            if not self._unlock(held, sys.exc_info(), holder, reporter):
                raise
        else:
            self._slot_lock = self._record_index = None
            self._forget_looks()
            self._final_report(reporter)
            self._unlock(held, (None, None, None), holder, reporter)

    def _unlock(
        self,
        held: contextlib.AbstractContextManager[None],
        exc_info: tuple[Any, Any, Any],
        holder: LockHolder,
        reporter: Reporter,
    ) -> bool:
        """Release the lock; a failure to do so is a warning (the lock expires by its TTL),
        never what the operation ends with. True when ``held`` suppressed the exception."""
        try:
            with edge(f"host {self.primary}: unlock"):
                return bool(held.__exit__(*exc_info))
        except BackendError as exc:
            name = labels.lock(self.app.name, self.slot.name)
            reporter.line(
                f"warning: releasing the lock of slot {self.slot.name!r} failed ({exc}); it "
                f"expires by itself at the latest {holder.ttl:g}s after its last renewal, or "
                f"clear it now by removing the container {name} on host {self.primary} "
                f"(docker rm -f {name})"
            )
            return False

    def _final_report(self, reporter: Reporter) -> None:
        """After an operation in which something failed (and whatever undo followed):
        what happened on each host, in order."""
        if self._trouble:
            reporter.line("what happened on each host:")
            for line in self.host_report():
                reporter.line(f"  {line}")
