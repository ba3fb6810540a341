"""The one retry policy every backend's edge uses: transient engine faults are tried again.

Real engines answer 429 under load (Kubernetes' API priority and fairness), 5xx while an
API server or an etcd member restarts, 409 when an optimistic write raced another writer,
and connections drop. Each backend decides which of its calls may be repeated and what a
failure means (its *classifier*, next to the library it speaks); this module decides how
often and how long: capped exponential back-off with full jitter, a server's
``Retry-After`` honoured, bounded by the call's own budget and by the deadline of the wait
it runs in, and every retry said as a line — never silently.

What must never happen here:

* a non-idempotent call repeated blindly — a classifier only calls such a failure
  transient when the request provably did not take effect (the server refused it before
  acting: 429, 503, a connection that never opened), or when the backend re-read the
  target and found the first attempt did not land (see each backend's ``retrying``);
* a retry that outlives its wait — no attempt starts after the deadline, and a
  ``Retry-After`` longer than what is left ends the retries instead of overrunning;
* a retry that hides the failure — when the attempts run out, the last error is raised as
  it was, and :func:`gave_up` tells the edge how many attempts it took.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from shipway.backends.protocol import Reporter

T = TypeVar("T")

#: what the edge is doing now (``applying Deployment/shop-web``), for the retry lines
_DOING: contextvars.ContextVar[str | None] = contextvars.ContextVar("shipway_doing", default=None)
#: the deadline (time.monotonic()) of the wait the calls run in, if any
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "shipway_deadline", default=None
)
# A retry nobody gave a reporter for (a read outside any operation) is still said: logged
# at WARNING, which Python prints to stderr when the application configured no logging.
_log = logging.getLogger("shipway.retry")


@dataclass(frozen=True)
class Transient:
    """Why a failed call may be tried again: ``why`` in the engine's words
    (``503 ServiceUnavailable``), and how long the server asked to wait, if it did."""

    why: str
    retry_after: float | None = None


Classifier = Callable[[BaseException], "Transient | None"]


@contextlib.contextmanager
def doing(what: str) -> Iterator[None]:
    """For the block: what the calls are for, as the retry lines name it."""
    token = _DOING.set(what)
    try:
        yield
    finally:
        _DOING.reset(token)


@contextlib.contextmanager
def within(deadline: float) -> Iterator[None]:
    """For the block (a wait, or one last look after it): no retry starts after
    ``deadline`` (time.monotonic()); the innermost block's deadline is the one that holds."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def deadline() -> float | None:
    """The deadline of the wait the current calls run in (None: only their own budget)."""
    return _DEADLINE.get()


_GAVE_UP: weakref.WeakKeyDictionary[object, tuple[int, float]] = weakref.WeakKeyDictionary()
_GAVE_UP_LOCK = threading.Lock()


def mark_gave_up(answer: object, source: BaseException) -> None:
    """``answer`` (an engine's last response, say) ended the retries ``source`` ended."""
    with _GAVE_UP_LOCK:
        found = _GAVE_UP.get(source)
        if found is not None:
            _GAVE_UP[answer] = found


def gave_up(failure: object) -> str:
    """`` (after N attempts in Ts)`` when ``failure`` (an exception, or the response it
    carries) ended a run of retries, else ``""``: what the edge adds to its message, so a
    user sees the fault was not a one-off."""
    if failure is None:
        return ""
    with _GAVE_UP_LOCK:
        try:
            found = _GAVE_UP.get(failure)
        except TypeError:  # not weakly referenceable: never marked
            found = None
    if found is None or found[0] < 2:
        return ""
    attempts, spent = found
    return f" (after {attempts} attempts in {spent:.1f}s)"


class RetryPolicy:
    """Capped exponential back-off with full jitter (attempt n waits a random time in
    ``[0, min(cap, base * 2**(n-1))]``), at most ``attempts`` tries in ``budget`` seconds per
    call. ``reporter`` hears every retry; the backend sets it to its operation's."""

    def __init__(
        self,
        *,
        attempts: int = 6,
        base: float = 0.2,
        cap: float = 3.0,
        budget: float = 20.0,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.attempts = attempts
        self.base = base
        self.cap = cap
        self.budget = budget
        self.clock = clock
        self.sleep = sleep
        self.reporter: Reporter | None = None
        self._random = random.Random(seed)
        self._random_lock = threading.Lock()

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """How long to wait before attempt ``attempt + 1``: the server's ``Retry-After``
        when it gave one (it knows best), else the jittered back-off."""
        if retry_after is not None:
            return max(0.0, retry_after)
        ceiling = min(self.cap, self.base * (2 ** max(0, attempt - 1)))
        with self._random_lock:
            return self._random.uniform(0.0, ceiling)

    def call(
        self,
        fn: Callable[[], T],
        classify: Classifier,
        *,
        what: str | None = None,
        budget: float | None = None,
    ) -> T:
        """``fn()``, tried again while ``classify`` calls its failure transient and time is
        left; the last failure is raised unchanged. ``what`` names the call in the retry
        lines where no edge said what the calls are for (:func:`doing`)."""
        started = self.clock()
        end = started + (self.budget if budget is None else budget)
        wait_end = _DEADLINE.get()
        if wait_end is not None:
            end = min(end, wait_end)
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except Exception as exc:
                transient = classify(exc)
                if transient is None:
                    raise
                pause = self.delay(attempt, transient.retry_after)
                now = self.clock()
                if attempt >= self.attempts or now + pause > end:
                    with _GAVE_UP_LOCK:
                        _GAVE_UP[exc] = (attempt, now - started)
                    raise
                self.say(
                    f"retrying {_DOING.get() or what or 'an engine call'} after "
                    f"{transient.why} (attempt {attempt + 1} of {self.attempts}, "
                    f"in {pause:.1f}s)"
                )
                self.sleep(pause)

    def say(self, text: str) -> None:
        """A retry line: to the operation's reporter, else to the ``shipway.retry`` log."""
        reporter = self.reporter
        if reporter is not None:
            reporter.line(text)
        else:
            _log.warning("%s", text)


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header's delay in seconds (the HTTP-date form is not used by the
    engines shipway speaks to, and is ignored)."""
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        return None
