"""A bounded request loop in a thread, the one the zero-failed-requests tests run beside a
redeploy, a switch or a canary: ``fetch(i)`` gives the i-th request's ``(status, body)``,
one request after another (at most ``limit``, at most ``rate`` a second when given) until
the ``with`` block ends, and at least ``least`` of them (an action quicker than that many
requests is followed by the rest); every answer is kept in order with the time it was asked,
and a request that raised ``OSError`` (refused, reset, timed out) is an answer with status 0."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple


class Answer(NamedTuple):
    began: float
    status: int
    body: str


class RequestLoop:
    def __init__(
        self,
        fetch: Callable[[int], tuple[int, str]],
        *,
        limit: int = 20_000,
        rate: float | None = None,
        least: int = 0,
    ) -> None:
        self.fetch, self.limit, self.rate, self.least = fetch, limit, rate, least
        self.answers: list[Answer] = []
        self._stop = threading.Event()
        self._enough = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for i in range(self.limit):
            if self._stop.is_set():
                return
            began = time.monotonic()
            try:
                status, body = self.fetch(i)
            except OSError as exc:
                status, body = 0, repr(exc)
            self.answers.append(Answer(began, status, body))
            if len(self.answers) >= self.least:
                self._enough.set()
            if self.rate:
                self._stop.wait(max(0.0, 1 / self.rate - (time.monotonic() - began)))

    def __enter__(self) -> RequestLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.least:
            self._enough.wait(timeout=60)
        self._stop.set()
        self._thread.join(timeout=30)

    @property
    def done(self) -> int:
        return len(self.answers)

    def failed(self, body: str | None = None) -> list[Answer]:
        """The answers that are not a 200 (with ``body``, when given)."""
        return [a for a in self.answers if a.status != 200 or (body is not None and a.body != body)]


#: The one failure a request through the Docker hosts' Caddy may meet at a config reload:
#: the old server, shutting down, closes a connection it accepted and read without answering
#: (Go's net/http, golang/go#75591; docs/docker.md, *What is not zero-downtime*). A deploy's
#: switch does not reload (its tests allow no failure); tests of what still reloads (a stop,
#: a canary's shares) allow it once per reload and no other failure.
RELOAD_RACE = "RemoteDisconnected"


def beyond_reload_race(failures: list[str], reloads: int) -> list[str]:
    """The failures that are not the known reload race, and the race's beyond one a reload."""
    race = [f for f in failures if RELOAD_RACE in f]
    other = [f for f in failures if RELOAD_RACE not in f]
    return other + race[reloads:]
