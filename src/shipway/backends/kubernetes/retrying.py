"""Which Kubernetes API calls may be repeated, and the client that repeats them.

Every call the backend makes goes through :class:`RetryingClient`, a thin wrapper around
lightkube's client applying the shared :class:`~shipway.backends.retry.RetryPolicy`
according to what the call is (client-go draws the same lines):

* reads (``get``, ``list``) — on 429, 500/502/503/504 and any transport error;
* server-side apply and the merge patches shipway sends (neither carries a
  resourceVersion, so a repeat applies the same intent to whatever is live now) — the same,
  and on 409 Conflict too: the API server raced another writer, and sending again is the
  re-read that resolves it;
* deletes — the same; a repeat that finds the object gone (404) is the first attempt
  having landed;
* ``create`` and ``replace`` (the Lease: an optimistic write at a resourceVersion) — not
  idempotent. Repeated at once only when the server refused before acting (429, 503, or any
  answer with ``Retry-After``) or the connection never opened. After an answer that leaves
  it open (500, 502, 504, a connection cut after sending), the object is read back first:
  a created object carrying our own mark (its annotations), or a replaced one showing our
  spec at a new resourceVersion, is the first attempt having landed and is returned as its
  answer; an object still at the resourceVersion we sent (or no object) means it did not
  land, and the write is sent again; anything else is raised as it was — never a second
  write that could clobber someone else's.

Watches are reopened by :mod:`.watch` with the same policy's back-off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import httpx2
from lightkube.core.exceptions import ApiError

from shipway.backends.retry import RetryPolicy, Transient, retry_after_seconds

T = TypeVar("T")

RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})
#: the server said no before acting: safe to send any request again
REFUSED_BEFORE_ACTING = frozenset({429, 503})
#: the connection never carried the request
UNSENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)


def status_of(exc: BaseException) -> tuple[int, str, float | None] | None:
    """(code, reason, Retry-After seconds) of an HTTP error answer, else None."""
    if isinstance(exc, ApiError):
        code, reason = int(exc.status.code or 0), str(exc.status.reason or "")
        after = None
        response = getattr(exc, "response", None)
        if response is not None:
            after = retry_after_seconds(response.headers.get("Retry-After"))
        details = exc.status.details
        if after is None and details is not None and details.retryAfterSeconds:
            after = float(details.retryAfterSeconds)
        return code, reason, after
    if isinstance(exc, httpx2.HTTPStatusError):
        response = exc.response
        return (
            response.status_code,
            response.reason_phrase,
            retry_after_seconds(response.headers.get("Retry-After")),
        )
    return None


def _said(code: int, reason: str, after: float | None) -> Transient:
    return Transient(f"{code} {reason}".strip(), after)


def _connection(exc: BaseException) -> Transient:
    return Transient(f"a connection error ({type(exc).__name__}: {exc or 'no detail'})")


def transient_read(exc: BaseException) -> Transient | None:
    """A read (or a watch) that may be sent again."""
    found = status_of(exc)
    if found is not None:
        return _said(*found) if found[0] in RETRIED_STATUS else None
    if isinstance(exc, httpx2.TransportError):
        return _connection(exc)
    return None


def transient_apply(exc: BaseException) -> Transient | None:
    """A server-side apply or resourceVersion-free patch: a read's faults, and 409."""
    found = status_of(exc)
    if found is not None and found[0] == 409:
        return _said(*found)
    return transient_read(exc)


def refused_before_acting(exc: BaseException) -> Transient | None:
    """A failure after which even a non-idempotent request may be sent again."""
    found = status_of(exc)
    if found is not None:
        code, _, after = found
        return _said(*found) if code in REFUSED_BEFORE_ACTING or after is not None else None
    if isinstance(exc, UNSENT):
        return _connection(exc)
    return None


class RetryingClient:
    """lightkube's client, each call retried as its kind allows (see the module's doc).
    Anything not wrapped here (``config``, ``namespace``, ``log``, ``close``) passes through."""

    def __init__(self, client: Any, policy: RetryPolicy) -> None:
        self._client = client
        self.policy = policy

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    @property
    def unwrapped(self) -> Any:
        return self._client

    # -- idempotent ----------------------------------------------------------------

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self.policy.call(lambda: self._client.get(*args, **kwargs), transient_read)

    def list(self, *args: Any, **kwargs: Any) -> list[Any]:
        """The whole listing (every page), retried as one read."""
        return self.policy.call(lambda: list(self._client.list(*args, **kwargs)), transient_read)

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        return self.policy.call(lambda: self._client.apply(*args, **kwargs), transient_apply)

    def patch(self, *args: Any, **kwargs: Any) -> Any:
        """Merge patches without a resourceVersion (replicas, Ingress backends): applying
        one twice is applying it once."""
        return self.policy.call(lambda: self._client.patch(*args, **kwargs), transient_apply)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        attempts = 0

        def once() -> Any:
            nonlocal attempts
            attempts += 1
            try:
                return self._client.delete(*args, **kwargs)
            except ApiError as exc:
                if attempts > 1 and exc.status.code == 404:
                    return None  # an earlier attempt deleted it
                raise

        return self.policy.call(once, transient_read)

    # -- not idempotent: repeated only when the first attempt cannot have landed ----

    def create(self, obj: Any, **kwargs: Any) -> Any:
        return self._write(obj, lambda: self._client.create(obj, **kwargs), self._created)

    def replace(self, obj: Any, **kwargs: Any) -> Any:
        return self._write(obj, lambda: self._client.replace(obj, **kwargs), self._replaced)

    def _write(
        self, obj: Any, send: Callable[[], Any], landed: Callable[[Any], tuple[bool, Any]]
    ) -> Any:
        unknown = False  # an earlier attempt may have landed: read back before sending

        def once() -> Any:
            nonlocal unknown
            if unknown:
                did, live = landed(obj)  # a failing read here is retried as a read
                if did:
                    return live
                unknown = False
            try:
                return send()
            except Exception as exc:
                if refused_before_acting(exc) is None and transient_read(exc) is not None:
                    unknown = True  # 500/502/504 or a cut connection: read back next
                raise

        def classify(exc: BaseException) -> Transient | None:
            # while the first attempt's fate is unknown, the next one reads it back first
            return transient_read(exc) if unknown else refused_before_acting(exc)

        return self.policy.call(once, classify)

    def _current(self, obj: Any) -> Any:
        meta = obj.metadata
        try:
            if meta.namespace:
                return self._client.get(type(obj), meta.name, namespace=meta.namespace)
            return self._client.get(type(obj), meta.name)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    def _created(self, obj: Any) -> tuple[bool, Any]:
        """Did a create land? Only an object carrying our mark (every annotation we sent,
        non-empty) is ours; no object means it did not; another's is raised as a conflict
        by the next attempt itself."""
        live = self._current(obj)
        if live is None:
            return False, None
        return _marked_as(obj, live), live

    def _replaced(self, obj: Any) -> tuple[bool, Any]:
        """Did a replace at a resourceVersion land? Still at that version: no. At a new one
        with our spec and mark: yes. Anything else: someone else wrote it — the next
        attempt is refused with 409, which is what the caller must hear."""
        live = self._current(obj)
        if live is None:
            return False, None
        sent_version = obj.metadata.resourceVersion
        if live.metadata.resourceVersion == sent_version:
            return False, None
        same_spec = _spec(obj) == _spec(live)
        return same_spec and _marked_as(obj, live), live


def _spec(obj: Any) -> Any:
    return obj.to_dict().get("spec")


def _marked_as(sent: Any, live: Any) -> bool:
    ours = dict(sent.metadata.annotations or {})
    theirs = dict(live.metadata.annotations or {}) if live.metadata else {}
    return bool(ours) and all(theirs.get(k) == v for k, v in ours.items())
