"""Watching sets of objects: list once, then watch from that list's resourceVersion.

Waiting is driven by watch events, never by polling: a :class:`LiveSet` keeps the current
state of one kind of object (one namespace, one selector) in memory, as plain dicts, and
every change wakes whoever waits on its :class:`Changes`. All watches of one backend run
on one asyncio loop in a daemon thread (:class:`WatchLoop`), so the caller's thread stays
free to time out and to receive signals, and stopping a watch is a clean cancellation.

Request cost: one list and one long-lived watch per set (re-opened, with back-off, only if
the server closes it or it breaks; listed again only when it is too old to resume); a
rollout wait tracks the app's Deployments and Pods: four requests per operation, whatever
the number of processes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from shipway.errors import BackendError

if TYPE_CHECKING:
    from lightkube import AsyncClient
    from lightkube.config.kubeconfig import SingleConfig

class WatchLoop:
    """One event loop thread and one async client, started on first use."""

    def __init__(self, config: SingleConfig) -> None:
        self.config = config
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: AsyncClient | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="shipway-watch", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def client(self) -> AsyncClient:
        """The async client; only for use on the loop's own thread."""
        if self._client is None:
            from lightkube import AsyncClient

            self._client = AsyncClient(config=self.config)
        return self._client

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._ensure())

    def close(self) -> None:
        with self._lock:
            loop, thread, client = self._loop, self._thread, self._client
            self._loop = self._thread = self._client = None
        if loop is None:
            return
        if client is not None:
            closing = asyncio.run_coroutine_threadsafe(client.close(), loop)
            with contextlib.suppress(Exception):  # closing is best effort
                closing.result(timeout=2)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=2)


class Changes:
    """A version counter and a condition shared by the live sets one wait looks at."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.version = 0

    def bump(self) -> None:
        with self.cond:
            self.version += 1
            self.cond.notify_all()

    def wait_past(self, version: int, timeout: float) -> int:
        """Block until the version moves past ``version`` or ``timeout`` passes."""
        end = time.monotonic() + max(0.0, timeout)
        with self.cond:
            while self.version <= version:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            return self.version


#: the first and the longest wait between two attempts to watch again (doubling in between)
BACKOFF = (0.2, 5.0)
#: answers worth watching again after: the watch is too old (410: list again first), the
#: server is throttling or failing for a while; any other answer ends the watch with it
TRANSIENT = frozenset({410, 429, 500, 502, 503, 504})


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt`` (1, 2 …) to watch again."""
    first, longest = BACKOFF
    return float(min(longest, first * 2 ** (attempt - 1)))


class LiveSet:
    """The objects of one kind matching a selector, as last seen, by name."""

    def __init__(
        self,
        loop: WatchLoop,
        resource: type[Any],
        namespace: str,
        changes: Changes,
        *,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> None:
        self.loop = loop
        self.resource = resource
        self.namespace = namespace
        self.changes = changes
        self.labels = dict(labels) if labels else None
        self.fields = dict(fields) if fields else None
        self.objects: dict[str, dict[str, Any]] = {}
        self.initial: dict[str, dict[str, Any]] = {}
        self.error: str | None = None
        self._listed = threading.Event()
        self._future: concurrent.futures.Future[Any] | None = None

    @property
    def what(self) -> str:
        return getattr(self.resource, "__name__", str(self.resource))

    def start(self, timeout: float = 60.0) -> LiveSet:
        """Start watching; return once the initial list is in (or raise BackendError)."""
        self._future = self.loop.submit(self._run())
        end = time.monotonic() + timeout
        while not self._listed.wait(0.2):
            if self._future.done() or time.monotonic() > end:
                break
        if not self._listed.is_set():
            failed = self._future.done() and not self._future.cancelled()
            raised = self._future.exception() if failed else None
            detail = self.error or (
                f"{type(raised).__name__}: {raised}" if raised else f"no answer within {timeout:g}s"
            )
            self.stop()
            raise BackendError(f"cannot list {self.what} in {self.namespace}: {detail}")
        return self

    def stop(self) -> None:
        if self._future is not None:
            self._future.cancel()
            self._future = None

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.changes.cond:
            return dict(self.objects)

    async def _run(self) -> None:
        """List, then watch from the list's resourceVersion, for as long as the set is
        watched. A watch that ends, cannot reconnect or is refused for a while is opened
        again with back-off (from the last version seen), never ending the wait; a watch
        too old to resume (410 Gone) lists again and the set becomes exactly that list, so
        an object deleted meanwhile never stays in it. Only the first list's failure, or an
        answer that will not change (403, 404 …), ends the set with ``error``."""
        from lightkube.core.exceptions import ApiError

        client = self.loop.client()
        kwargs: dict[str, Any] = {"namespace": self.namespace}
        if self.labels:
            kwargs["labels"] = self.labels
        if self.fields:
            kwargs["fields"] = self.fields
        list_: Any = client.list
        watch: Any = client.watch
        version: str | None = None
        attempt = 0
        while True:
            try:
                if version is None:
                    version = await self._list(list_, kwargs)
                async for event, obj in watch(self.resource, resource_version=version, **kwargs):
                    attempt = 0
                    item = obj.to_dict()
                    name = item["metadata"]["name"]
                    version = item["metadata"].get("resourceVersion") or version
                    with self.changes.cond:
                        if event == "DELETED":
                            self.objects.pop(name, None)
                        else:
                            self.objects[name] = item
                    self.changes.bump()
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                code = exc.status.code
                if not self._listed.is_set() or code not in TRANSIENT:
                    self.error = f"{code} {exc.status.reason}: {exc.status.message}"
                    self.changes.bump()
                    return
                if code == 410:
                    version = None  # too old to resume: list again
            except Exception as exc:
                if not self._listed.is_set():
                    self.error = f"{type(exc).__name__}: {exc}"
                    self.changes.bump()
                    return
            attempt += 1
            await asyncio.sleep(backoff(attempt))

    async def _list(self, list_: Any, kwargs: Mapping[str, Any]) -> str:
        """List the set afresh: it becomes exactly what the list holds. Returns the list's
        resourceVersion, to watch from."""
        listing = list_(self.resource, **kwargs)
        items = [obj.to_dict() async for obj in listing]
        with self.changes.cond:
            self.objects = {item["metadata"]["name"]: item for item in items}
            if not self._listed.is_set():
                self.initial = dict(self.objects)
        self._listed.set()
        self.changes.bump()
        return str(listing.resourceVersion)
