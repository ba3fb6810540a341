"""Watching sets of objects: list once, then watch from that list's resourceVersion.

Waiting is driven by watch events, never by polling: a :class:`LiveSet` keeps the current
state of one kind of object (one namespace, one selector) in memory, as plain dicts, and
every change wakes whoever waits on its :class:`Changes`. All watches of one backend run
on one asyncio loop in a daemon thread (:class:`WatchLoop`), so the caller's thread stays
free to time out and to receive signals, and stopping a watch is a clean cancellation.

Request cost: one list and one long-lived watch per set (re-opened only if the server
closes it); a rollout wait tracks the app's Deployments and Pods: four requests per
operation, whatever the number of processes.

A watch survives faults: one that fails to open or is cut is watched again from the last
resourceVersion it saw (nothing missed, nothing listed); one that answers 410 Gone (that
version is too old) is listed and watched again — with the retry policy's back-off, for as
long as it is wanted (the waits bound it by their deadlines). Re-listing replaces what the
set holds (objects deleted meanwhile go), while :attr:`LiveSet.initial`
— the objects that existed before the operation — stays as first listed. Each reopening
is noted for the wait to say (:meth:`LiveSet.take_notes`). Only an error no retry can cure
(403 Forbidden, 404 on the namespace, a response lightkube cannot decode) ends a set:
:attr:`LiveSet.error`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from shipway.backends.retry import RetryPolicy, Transient
from shipway.errors import BackendError

if TYPE_CHECKING:
    from lightkube import AsyncClient
    from lightkube.config.kubeconfig import SingleConfig

#: a watch that stayed up this long counts as healthy: the next failure backs off afresh
HEALTHY_AFTER = 5.0


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


def watch_fault(exc: BaseException) -> Transient | None:
    """Why a list or watch may be opened again: a read's transient faults, and 410 Gone
    (the resourceVersion expired: re-list, at once)."""
    from shipway.backends.kubernetes.retrying import status_of, transient_read

    found = status_of(exc)
    if found is not None and found[0] == 410:
        return Transient("410 Gone (its resourceVersion expired)", 0.0)
    return transient_read(exc)


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
        policy: RetryPolicy | None = None,
        initial: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        self.loop = loop
        self.resource = resource
        self.namespace = namespace
        self.changes = changes
        self.labels = dict(labels) if labels else None
        self.fields = dict(fields) if fields else None
        self.policy = policy or RetryPolicy()
        self.objects: dict[str, dict[str, Any]] = {}
        #: what existed before the operation: the first listing (or one carried over from
        #: an earlier set of the same operation), never replaced by a re-list
        self.initial: dict[str, dict[str, Any]] = dict(initial) if initial is not None else {}
        self._carried = initial is not None
        #: why the set cannot be kept up to date at all (then it is dead)
        self.error: str | None = None
        #: why the set is not up to date now (None while its watch runs)
        self.down: str | None = None
        self._notes: list[str] = []
        #: the last resourceVersion seen: a watch reopened after a fault resumes from it,
        #: missing nothing and listing nothing (None: list first — at the start, or after
        #: 410 Gone, when the server no longer keeps the history from there)
        self._resume: str | None = None
        self._listed = threading.Event()
        self._future: concurrent.futures.Future[Any] | None = None

    @property
    def what(self) -> str:
        return getattr(self.resource, "__name__", str(self.resource))

    def start(self, timeout: float = 60.0) -> LiveSet:
        """Start watching; return once the initial list is in (or raise BackendError: the
        list failed for good, or kept failing for ``timeout`` seconds)."""
        self._future = self.loop.submit(self._run())
        end = time.monotonic() + timeout
        while not self._listed.wait(0.2):
            if self._future.done() or time.monotonic() > end:
                break
        if not self._listed.is_set():
            failed = self._future.done() and not self._future.cancelled()
            raised = self._future.exception() if failed else None
            detail = (
                self.error
                or self.down
                or (f"{type(raised).__name__}: {raised}" if raised else None)
                or f"no answer within {timeout:g}s"
            )
            self.stop()
            raise BackendError(f"cannot list {self.what} in {self.namespace}: {detail}")
        return self

    @property
    def dead(self) -> bool:
        """Stopped for good (an error no retry cures, or its task ended): a later wait
        must open a set of its own rather than share this one."""
        future = self._future
        return self.error is not None or future is None or future.done()

    def take_notes(self) -> list[str]:
        """What happened to the watch since the last call (each reopening), to be said."""
        with self.changes.cond:
            notes, self._notes = self._notes, []
        return notes

    def stop(self) -> None:
        if self._future is not None:
            self._future.cancel()
            self._future = None

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.changes.cond:
            return dict(self.objects)

    async def _run(self) -> None:
        """List, then watch from that list's resourceVersion; on a fault, back off and
        watch again from the last version seen (listing again only after 410 Gone, and
        then the set becomes exactly that list), until cancelled or an error no retry
        cures."""
        from lightkube.core.exceptions import ApiError

        from shipway.backends.kubernetes.retrying import status_of

        failures = 0
        while True:
            opened = time.monotonic()
            try:
                await self._list_and_watch()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                fault = watch_fault(exc)
                if fault is None:
                    if isinstance(exc, ApiError):
                        self.error = f"{exc.status.code} {exc.status.reason}: {exc.status.message}"
                    else:
                        self.error = f"{type(exc).__name__}: {exc}"
                    self.changes.bump()
                    return
                failures = 1 if time.monotonic() - opened >= HEALTHY_AFTER else failures + 1
                pause = self.policy.delay(failures, fault.retry_after)
                gone = (found := status_of(exc)) is not None and found[0] == 410
                if gone:
                    self._resume = None  # too old to resume: list again
                again = (
                    "listing and watching again"
                    if self._resume is None
                    else (f"watching again from version {self._resume}")
                )
                with self.changes.cond:
                    self.down = fault.why
                    self._notes.append(
                        f"watch of {self.what} in {self.namespace}: {fault.why}; {again} "
                        f"in {pause:.1f}s (attempt {failures + 1})"
                    )
                self.changes.bump()
                await asyncio.sleep(pause)

    async def _list_and_watch(self) -> None:
        client = self.loop.client()
        kwargs: dict[str, Any] = {"namespace": self.namespace}
        if self.labels:
            kwargs["labels"] = self.labels
        if self.fields:
            kwargs["fields"] = self.fields
        list_: Any = client.list
        watch: Any = client.watch
        if self._resume is None:
            listing = list_(self.resource, **kwargs)
            items = [obj.to_dict() async for obj in listing]
            with self.changes.cond:
                self.objects = {item["metadata"]["name"]: item for item in items}
                if not self._listed.is_set() and not self._carried:
                    self.initial = dict(self.objects)
                self.down = None
            self._resume = str(listing.resourceVersion)
            self._listed.set()
            self.changes.bump()
        # lightkube reopens a watch the server ended cleanly, from the last version seen;
        # every error comes here (its default on_error raises)
        async for event, obj in watch(self.resource, resource_version=self._resume, **kwargs):
            item = obj.to_dict()
            name = item["metadata"]["name"]
            with self.changes.cond:
                self._resume = item["metadata"].get("resourceVersion") or self._resume
                self.down = None
                if event == "DELETED":
                    self.objects.pop(name, None)
                else:
                    self.objects[name] = item
            self.changes.bump()
