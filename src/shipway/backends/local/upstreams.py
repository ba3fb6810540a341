"""The router's idle kept-alive connections to the instances it routes to. Standard
library only: the router process loads it (and never imports shipway).

A connection goes back to the pool only after an answer that ended cleanly with nothing
after it; one taken out is the newest; one that idled past ``UPSTREAM_IDLE``, that its
instance closed meanwhile, or whose upstream left the table is closed, never used.
"""

from __future__ import annotations

import time
from typing import Generic, Protocol, TypeVar

UPSTREAM_IDLE = 30.0  # an idle connection to an instance is closed after this
POOL_SIZE = 32  # idle connections kept per upstream


class Idle(Protocol):
    """What the pool needs of a connection."""

    def alive(self) -> bool:
        """Neither end closed it (an instance closes what idles too long)."""
        ...

    def close(self) -> None: ...


C = TypeVar("C", bound=Idle)


class Pool(Generic[C]):
    """Idle connections to each upstream (``127.0.0.1:<port>``), newest first out."""

    def __init__(self) -> None:
        self.idle: dict[str, list[tuple[C, float]]] = {}

    def take(self, upstream: str) -> C | None:
        entries = self.idle.get(upstream)
        now = time.monotonic()
        while entries:
            conn, since = entries.pop()
            if conn.alive() and now - since <= UPSTREAM_IDLE:
                return conn
            conn.close()
        return None

    def give(self, upstream: str, conn: C) -> None:
        entries = self.idle.setdefault(upstream, [])
        if len(entries) >= POOL_SIZE:
            conn.close()
            return
        entries.append((conn, time.monotonic()))

    def sweep(self, known: set[str]) -> None:
        """Close what idled too long, and every connection to an upstream no longer routed."""
        now = time.monotonic()
        for upstream in list(self.idle):
            keep = []
            for conn, since in self.idle[upstream]:
                if conn.alive() and upstream in known and now - since <= UPSTREAM_IDLE:
                    keep.append((conn, since))
                else:
                    conn.close()
            if keep:
                self.idle[upstream] = keep
            else:
                del self.idle[upstream]
