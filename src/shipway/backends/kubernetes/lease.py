"""The slot's lock: a ``coordination.k8s.io/v1`` Lease per app and slot.

What must never happen, and how it is prevented:

* two deploys of one slot at once — the Lease is taken with optimistic concurrency (create,
  or replace at the resourceVersion that was read): of two racers, one gets a conflict;
* a live lock broken because two machines' clocks disagree — expiry is judged the way
  client-go's leader election judges it: by the time *this client* saw the Lease last
  change (its resourceVersion), on this client's own monotonic clock, never by the
  holder's ``renewTime``. A Lease someone holds is watched; if it changes meanwhile (a
  renewal, another holder) the deploy is refused, and only one left unchanged for its whole
  duration is taken over, with a line naming whose it was;
* a slot blocked for a minute behind a killed deploy — when the holder's mark
  (:mod:`~shipway.backends.liveness`: host, boot id, pid namespace, pid, start time) proves
  its process is gone from this very machine, the Lease is taken over at once, saying so;
  otherwise the Lease is short and renewed often (client-go's timing: 15 s duration, a
  10 s renew deadline, a try every 2 s), so a dead holder elsewhere blocks it for 15 s;
* a lock left behind — it is released on every exit path (the engine's ``with`` block;
  signals become exceptions there);
* releasing a lock someone else now holds — release is a replace at the resourceVersion
  of our last write, so it fails instead if the Lease changed hands;
* acting on a lock we no longer hold — :meth:`SlotLease.problem` says why the lock may not
  be relied on any more (a renewal found it changed hands or gone, or no renewal succeeded
  within the renew deadline, which ends before anyone may take the Lease over), and the
  backend checks it before every mutation and in its waits;
* a live operation giving up its lock to a slow API server — when the renew deadline
  passes while a renewal is on its way (sent, not answered yet), :meth:`SlotLease.problem`
  waits for that answer, at most until the Lease's duration since our last write (when
  another operation may take it over), and the lock holds if the renewal lands: a replace
  at our resourceVersion proves nobody else wrote the Lease meanwhile. Nothing is mutated
  or judged while it waits.

Releasing clears ``holderIdentity`` and keeps the object (like client-go's leader election),
so the next deploy reads it (one request) and writes itself in (one more).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from shipway.backends.liveness import ProcessMark
from shipway.backends.protocol import LockHolder, Reporter
from shipway.errors import SlotLocked

if TYPE_CHECKING:
    from lightkube import Client

HOST = "shipway.io/holder-host"
PID = "shipway.io/holder-pid"
SINCE = "shipway.io/holder-since"
BOOT = "shipway.io/holder-boot-id"
PIDNS = "shipway.io/holder-pid-ns"
START = "shipway.io/holder-start"

#: client-go's leader election: LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s
LEASE_SECONDS = 15


def lease_name(app: str, slot: str) -> str:
    return f"shipway-lock.{app}.{slot}"


def _now() -> datetime:
    return datetime.now(UTC)


def _parse(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    text = str(value).replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class LeaseTiming:
    """How long the Lease lasts (written in it), how long a holder may go without a
    successful renewal before it stops relying on it (the renew deadline, well inside the
    duration: nobody may take it over before the duration has passed), and how often it
    tries to renew — client-go's 15 s / 10 s / 2 s, scaled down for a shorter TTL."""

    duration: int
    renew_deadline: float
    retry: float

    @classmethod
    def of(cls, ttl: float) -> LeaseTiming:
        duration = max(1, round(min(ttl, LEASE_SECONDS)))
        return cls(duration, duration * 10 / 15, max(0.1, duration * 2 / 15))


@dataclass(frozen=True)
class LeaseState:
    """What a Lease says, independent of lightkube's types (pure, testable)."""

    holder: str | None
    renewed: datetime | None
    duration: float
    since: str
    version: str = ""
    mark: ProcessMark | None = None

    def expires(self) -> datetime | None:
        """When it runs out by the holder's clock (said to a user, never acted on)."""
        if self.renewed is None:
            return None
        return self.renewed + timedelta(seconds=self.duration)

    @classmethod
    def of(cls, lease: Any) -> LeaseState:
        spec = lease.spec
        meta = lease.metadata
        notes = (meta.annotations or {}) if meta else {}
        renewed = _parse(spec.renewTime) or _parse(spec.acquireTime) if spec else None
        mark = None
        if notes.get(HOST) and str(notes.get(PID, "")).isdigit():
            mark = ProcessMark(
                host=notes[HOST],
                pid=int(notes[PID]),
                boot=notes.get(BOOT, ""),
                pid_ns=notes.get(PIDNS, ""),
                start=notes.get(START, ""),
            )
        return cls(
            holder=(spec.holderIdentity if spec else None) or None,
            renewed=renewed,
            duration=float((spec.leaseDurationSeconds if spec else None) or 0),
            since=notes.get(SINCE) or (str(spec.acquireTime) if spec and spec.acquireTime else ""),
            version=str((meta.resourceVersion if meta else None) or ""),
            mark=mark,
        )


@dataclass(frozen=True)
class Observation:
    """client-go's observed record and observed time: the Lease version this client last
    saw change, and when it saw it (this client's monotonic clock)."""

    version: str
    at: float

    def expired(self, state: LeaseState, now: float) -> bool:
        """Expired once a whole duration passed, on our clock, without a change."""
        return state.version == self.version and now >= self.at + state.duration


class SlotLease:
    """Holds one slot's Lease for a ``with`` block."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        app: str,
        slot: str,
        holder: LockHolder,
        reporter: Reporter,
        *,
        ensure_namespace: Callable[[], None],
        renew_client: Callable[[], Client] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = lease_name(app, slot)
        self.slot = slot
        self.holder = holder
        self.reporter = reporter
        self.ensure_namespace = ensure_namespace
        self.renew_client = renew_client
        self._lease: Any = None
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: str | None = None
        self.lost_event = threading.Event()
        # called (from the renewing thread) when the lock is found lost: wakes the waits
        self.on_lost: Callable[[], None] | None = None
        self.clock: Callable[[], float] = time.monotonic
        #: how long the Lease lasts, the renew deadline and the renewal period
        self.timing = LeaseTiming.of(holder.ttl)
        # the duration written in the Lease: others may take it over that long after our
        # last successful write, which we time from before its request was sent
        self.duration = self.timing.duration
        self._written_at: float | None = None
        self._last_error: str | None = None
        # when the renewal on its way was sent (None: none is), and its answer's signal
        self._sending: float | None = None
        self._answered = threading.Condition()

    # -- the object ---------------------------------------------------------------

    def _body(self, previous: Any = None) -> Any:
        from lightkube.models.coordination_v1 import LeaseSpec
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.coordination_v1 import Lease

        now = _now()
        transitions = 0
        meta = ObjectMeta(name=self.name, namespace=self.namespace)
        if previous is not None:
            meta.resourceVersion = previous.metadata.resourceVersion
            transitions = (previous.spec.leaseTransitions or 0) + 1 if previous.spec else 1
        meta.annotations = {
            HOST: self.holder.host,
            PID: str(self.holder.pid),
            SINCE: self.holder.since,
            BOOT: self.holder.boot,
            PIDNS: self.holder.pid_ns,
            START: self.holder.start,
        }
        return Lease(
            metadata=meta,
            spec=LeaseSpec(
                holderIdentity=self.holder.holder,
                leaseDurationSeconds=self.duration,
                acquireTime=now,
                renewTime=now,
                leaseTransitions=transitions,
            ),
        )

    def _read(self) -> Any:
        from lightkube.core.exceptions import ApiError
        from lightkube.resources.coordination_v1 import Lease

        try:
            return self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            return None

    def _create(self) -> None:
        from lightkube.core.exceptions import ApiError

        sent = self.clock()
        try:
            self._lease = self.client.create(self._body())
        except ApiError as exc:
            if exc.status.code == 404:  # the namespace itself does not exist yet
                self.ensure_namespace()
                sent = self.clock()
                self._lease = self.client.create(self._body())
            elif exc.status.code == 409:
                self._refuse(self._read())
            else:
                raise
        self._written_at = sent

    def _replace(self, current: Any) -> None:
        """Write ourselves in at the resourceVersion read: a conflict means someone else
        took it meanwhile, and is refused."""
        from lightkube.core.exceptions import ApiError

        sent = self.clock()
        try:
            self._lease = self.client.replace(self._body(current))
        except ApiError as exc:
            if exc.status.code == 409:  # someone else took it between our read and write
                self._refuse(self._read())
            raise
        self._written_at = sent

    def acquire(self) -> None:
        """Take the Lease: free (never taken, or released), or its holder's process is
        provably gone from this machine (at once), or it did not change for its whole
        duration while this client watched it (expired, by our clock). A Lease that
        changes while it is watched has a live holder: refused."""
        current = self._read()
        seen: Observation | None = None
        while True:
            if current is None:
                self._create()
                return
            state = LeaseState.of(current)
            if not state.holder:
                self._replace(current)
                return
            gone = state.mark.gone() if state.mark is not None else None
            if gone is not None:
                self._replace(current)
                self.reporter.line(
                    f"broke the lock of slot {self.slot!r} held by {state.holder} since "
                    f"{state.since or 'an unknown time'}: {gone} (taken over at once, "
                    "without waiting for the Lease to expire)"
                )
                return
            now = self.clock()
            if seen is None:
                seen = Observation(state.version, now)
                self.reporter.line(
                    f"the lock of slot {self.slot!r} is held by {state.holder} since "
                    f"{state.since or 'an unknown time'}: watching it for up to "
                    f"{state.duration:g}s; it is taken over only if nobody renews it"
                )
            elif state.version != seen.version:
                self._refuse(current)  # renewed (or taken) while we watched: it is live
            elif seen.expired(state, now):
                self._replace(current)
                self.reporter.line(
                    f"broke the expired lock of slot {self.slot!r} held by {state.holder} "
                    f"since {state.since or 'an unknown time'} (not renewed for "
                    f"{state.duration:g}s while this client watched it)"
                )
                return
            left = seen.at + state.duration - now
            self._stop.wait(max(0.05, min(left, 0.5, state.duration / 10)))
            current = self._read()

    def _refuse(self, lease: Any) -> None:
        state = LeaseState.of(lease) if lease is not None else None
        end = state.expires() if state is not None else None
        raise SlotLocked(
            self.slot,
            (state.holder if state else None) or "another operation",
            (state.since if state else None) or "an unknown time",
            end.isoformat(timespec="seconds") if end else None,
        )

    # -- renewal ------------------------------------------------------------------

    def renew(self, client: Client) -> None:
        """One renewal (the background thread's tick)."""
        from lightkube.core.exceptions import ApiError

        with self._guard:
            lease = self._lease
            if lease is None or self.lost:
                return
            lease.spec.renewTime = _now()
            sent = self.clock()
            with self._answered:
                self._sending = sent
            landed = False
            try:
                self._lease = client.replace(lease)
                landed = True
            except ApiError as exc:
                status = exc.status
                if status.code in (404, 409):
                    why = "it changed hands" if status.code == 409 else "the Lease was deleted"
                    self._mark_lost(f"{why} ({status.code} {status.reason or status.message})")
                    return
                # any other error: try again at the next tick, while the Lease has slack
                self._last_error = f"{status.code} {status.reason or ''}: {status.message}"
                return
            finally:
                with self._answered:  # whoever waits for this answer (problem) has it now
                    if landed:
                        self._written_at = sent
                        self._last_error = None
                    self._sending = None
                    self._answered.notify_all()

    def _mark_lost(self, why: str) -> None:
        self.lost = why
        self.lost_event.set()
        if self.on_lost is not None:
            self.on_lost()

    def problem(self) -> str | None:
        """Why the lock may not be relied on any more, or None while we hold it: a renewal
        found it changed hands or gone, or no write of ours succeeded within the renew
        deadline (like client-go's leader, we stop there, before the Lease's duration
        is up and another operation may take it over as expired). Past the renew deadline
        with a renewal on its way, it first waits for that renewal's answer (at most until
        the duration is up): a slow API server does not lose a live operation its lock."""
        if self.lost:
            return self.lost
        if self._written_at is None:
            return None
        age = self.clock() - self._written_at
        if age >= self.timing.renew_deadline and self._sending is not None:
            age = self._await_renewal()
        if self.lost:
            return self.lost
        if age < self.timing.renew_deadline:
            return None
        sending = self._sending
        return (
            f"it was last renewed {age:.1f}s ago, beyond its "
            f"{self.timing.renew_deadline:g}s renew deadline (the Lease lasts {self.duration}s)"
            + (f" (renewing failed: {self._last_error})" if self._last_error else "")
            + (
                f" (a renewal sent {self.clock() - sending:.1f}s ago is still unanswered)"
                if sending is not None
                else ""
            )
        )

    def _await_renewal(self) -> float:
        """The renew deadline passed while a renewal is on its way: wait for its answer
        (a slow API server is not a lost lock), at most until the Lease's duration since our
        last write is up. The age of our last write then."""
        with self._answered:
            while True:
                assert self._written_at is not None
                age = self.clock() - self._written_at
                if self._sending is None or self.lost or age >= self.duration:
                    return age
                self._answered.wait(timeout=min(0.5, self.duration - age))

    def remaining(self) -> float | None:
        """Seconds until the lock may no longer be relied on unless a renewal succeeds
        before (None when it was never taken)."""
        if self._written_at is None:
            return None
        return self._written_at + self.timing.renew_deadline - self.clock()

    def _renew_loop(self) -> None:
        interval = self.timing.retry
        client: Client | None = None
        while not self._stop.wait(interval):
            try:
                client = client or (self.renew_client() if self.renew_client else self.client)
                self.renew(client)
            except Exception as exc:  # network trouble; retried next tick
                self._last_error = f"{type(exc).__name__}: {exc}"
        if client is not None and client is not self.client:
            client.close()

    # -- release ------------------------------------------------------------------

    def release(self) -> None:
        from lightkube.core.exceptions import ApiError

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._guard:
            lease = self._lease
            self._lease = None
        if lease is None:
            return
        if self.lost:
            self.reporter.line(f"warning: the lock of slot {self.slot!r} was lost: {self.lost}")
            return
        lease.spec.holderIdentity = None
        lease.spec.renewTime = _now()
        try:
            self.client.replace(lease)
        except ApiError as exc:
            if exc.status.code not in (404, 409):
                raise
            self.reporter.line(
                f"warning: the lock of slot {self.slot!r} changed hands before it was released"
            )

    def start_renewing(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._renew_loop, name=f"shipway-lease-{self.name}", daemon=True
            )
            self._thread.start()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.acquire()
        try:
            self.start_renewing()
            yield
        finally:
            self.release()
