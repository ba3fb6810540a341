"""A canary in the router: which release answers a request, and the counts per release.
Standard library only: the router process loads it (and never imports shipway).

A host's table entry may carry a canary beside its stable program::

    {"program": stable key, "upstreams": [...],
     "canary": {"id": "app.slot.r5", "program": key, "upstreams": [...], "weight": 10}}

Which side serves a request (:func:`choose`), in order:

1. ``X-Shipway-Canary: always`` → the canary, ``never`` → the stable (a tester's choice);
2. the ``shipway-canary`` cookie of *this* canary (``<id>.<bucket>``, bucket 0-99): the
   canary when the bucket is under the weight. Steps only grow, so a client on the canary
   stays there for the canary's life, and one on the stable moves only when the share
   passes its bucket;
3. no such cookie: a bucket drawn at random, and the cookie set on the answer.

Counts (:class:`Tally`), per canary and side, for the canary's hosts only (a route without
a canary pays nothing): requests answered, 5xx answers, failures (no instance could be
reached, or it broke the exchange before answering: the router's own 502/503; or its
answer's head had not come within the canary's ``answer_timeout``: counted when the counts
are next read, the request itself goes on and is not counted again), and a
histogram of the time to the answer's head (bucket 0: under ``BASE`` seconds; bucket ``i``:
``BASE x GROWTH**(i-1)`` to ``BASE x GROWTH**i``). shipway reads them on the control socket
(``GET /canary``) and decides (``shipway/plan/canary.py``); the router only counts.
"""

from __future__ import annotations

import math
import random
import time
import weakref
from typing import Any

COOKIE = "shipway-canary"
HEADER = b"x-shipway-canary"
BASE = 0.001
GROWTH = 1.25
BUCKETS = 64  # the last one holds everything past BASE x GROWTH**62 (about 1 000 s)
STABLE, CANARY = "stable", "canary"
ANSWER_TIMEOUT = 30.0  # the spec's default (shipway/spec/canary.py)


class Choice:
    """The side one request goes to, and the cookie its answer sets (None: none)."""

    __slots__ = ("__weakref__", "canary", "cookie", "late", "patience", "side", "started")

    def __init__(
        self, canary: str, side: str, cookie: bytes | None, patience: float = ANSWER_TIMEOUT
    ) -> None:
        self.canary, self.side, self.cookie = canary, side, cookie
        self.started = time.monotonic()
        self.patience = patience  #: the canary's answer_timeout
        self.late = False  #: counted as failed already: its answer had not come in time


def _bucket(cookies: bytes | None, canary: str) -> int | None:
    """The bucket this canary's cookie holds (None: no cookie of this canary)."""
    if not cookies:
        return None
    prefix = f"{COOKIE}={canary}.".encode()
    for part in cookies.split(b";"):
        part = part.strip()
        if part.startswith(prefix):
            raw = part[len(prefix) :]
            if raw.isdigit() and int(raw) < 100:
                return int(raw)
    return None


def choose(entry: dict[str, Any], named: dict[bytes, bytes]) -> Choice | None:
    """The side of a request to a host whose entry is ``entry`` (None: it has no canary)."""
    canary = entry.get("canary")
    if not canary:
        return None
    cid = str(canary.get("id", ""))
    patience = float(canary.get("answer_timeout") or ANSWER_TIMEOUT)
    forced = named.get(HEADER, b"").strip().lower()
    if forced == b"always":
        return Choice(cid, CANARY, None, patience)
    if forced == b"never":
        return Choice(cid, STABLE, None, patience)
    bucket = _bucket(named.get(b"cookie"), cid)
    cookie = None
    if bucket is None:
        bucket = random.randrange(100)
        cookie = f"{COOKIE}={cid}.{bucket}; Path=/; HttpOnly; SameSite=Lax".encode()
    side = CANARY if bucket < int(canary.get("weight", 0)) else STABLE
    return Choice(cid, side, cookie, patience)


def upstreams_of(entry: dict[str, Any], side: str | None) -> list[str]:
    """The upstreams of a side; the stable's when the entry has no canary (any more: a
    request that chose the canary before an abort is served by the stable)."""
    canary = entry.get("canary")
    if side == CANARY and canary:
        return list(canary.get("upstreams") or [])
    return list(entry["upstreams"])


def with_cookie(head: bytes, choice: Choice | None) -> bytes:
    """A response head (ending in its blank line) with the choice's cookie, if any."""
    if choice is None or choice.cookie is None:
        return head
    return head[:-2] + b"Set-Cookie: " + choice.cookie + b"\r\n\r\n"


class Tally:
    """Counts per (canary, side): [requests, 5xx, failures, histogram]."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], list[Any]] = {}
        self.since = time.time()
        #: the requests of a canary's host not answered yet; an exchange that ends any other
        #: way (its client gone) drops its choice with it
        self.pending: weakref.WeakSet[Choice] = weakref.WeakSet()

    def begin(self, choice: Choice | None) -> Choice | None:
        """A request of a canary's host goes out (``choice``, as :func:`choose` gave it)."""
        if choice is not None:
            self.pending.add(choice)
        return choice

    def _ended(self, choice: Choice) -> bool:
        """The request has its answer (or the router's): False when it was counted already
        as not answered in time."""
        self.pending.discard(choice)
        return not choice.late

    def _overdue(self) -> None:
        """Count each request still waiting past its canary's answer_timeout as failed."""
        now = time.monotonic()
        for choice in list(self.pending):
            if now - choice.started > choice.patience:
                self.pending.discard(choice)
                choice.late = True
                row = self._row(choice)
                row[0] += 1
                row[2] += 1

    def _row(self, choice: Choice) -> list[Any]:
        row = self.counts.get((choice.canary, choice.side))
        if row is None:
            row = self.counts[(choice.canary, choice.side)] = [0, 0, 0, [0] * BUCKETS]
        return row

    def answered(self, choice: Choice | None, status: int) -> None:
        """The answer's head came (``status``) for a request of a canary's host."""
        if choice is None or not self._ended(choice):
            return
        row = self._row(choice)
        row[0] += 1
        if status >= 500:
            row[1] += 1
        took = time.monotonic() - choice.started
        i = 0 if took < BASE else min(BUCKETS - 1, 1 + int(math.log(took / BASE, GROWTH)))
        row[3][i] += 1

    def failed(self, choice: Choice | None) -> None:
        """No answer from an instance: the router answered 502/503 itself."""
        if choice is None or not self._ended(choice):
            return
        row = self._row(choice)
        row[0] += 1
        row[2] += 1

    def snapshot(self) -> dict[str, Any]:
        self._overdue()
        out: dict[str, dict[str, Any]] = {}
        for (canary, side), (requests, s5xx, failures, hist) in self.counts.items():
            out.setdefault(canary, {})[side] = {
                "requests": requests,
                "5xx": s5xx,
                "failures": failures,
                "latency": {"base": BASE, "growth": GROWTH, "counts": list(hist)},
            }
        return {"since": self.since, "canaries": out}

    def forget(self, known: set[str]) -> None:
        """Drop the counts of canaries no table entry names any more."""
        for key in [k for k in self.counts if k[0] not in known]:
            del self.counts[key]
