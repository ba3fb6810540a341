"""Which Docker Engine API calls may be repeated, and the client that repeats them.

docker-py's low-level client is a ``requests`` session: every call of every model
(containers, images, volumes, networks) passes through its ``request``. Here that method
applies the shared :class:`~shipway.backends.retry.RetryPolicy` by what the call is:

* reads (GET, HEAD) and the calls whose repeat does what the first did — starting or
  stopping a container (a repeat answers 304), writing files
  into one (``PUT …/archive``), creating a volume (Docker answers with the existing one), a
  network (a repeat's 409 is what the caller already accepts), an exec instance (an unused
  one is harmless), pulling or importing an image, deleting anything (a repeat that finds it
  gone, 404, is the first attempt having landed) — on 429, 500/502/503/504 and
  connection errors;
* creating a container (always by name, in shipway): repeated at once when the engine
  refused before acting (429, 503) or the connection never opened; after an answer that
  leaves it open (500, 502, 504, a connection cut after sending) the container of that name
  is inspected first — one carrying every label sent (shipway's labels name the unit, its
  digest, the lock's holder or the record's sequence) is the first attempt having landed,
  and its id is the answer; none means it did not land, and the create is sent
  again; another's is left to the next attempt's 409, which the caller hears;
* anything else (starting an exec instance, attaching): only when the engine refused
  before acting or the connection never opened. Where the whole command is safe to run
  twice (the proxy's ``caddy reload``), its caller repeats the command itself.

A body that cannot be sent twice (a stream) is never repeated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import docker
import requests
import urllib3.exceptions

from shipway.backends.retry import RetryPolicy, Transient, mark_gave_up, retry_after_seconds

RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})
REFUSED_BEFORE_ACTING = frozenset({429, 503})

_VERSION = re.compile(r"^/v\d+(\.\d+)?(?=/)")
# not /wait: a wait that timed out is an answer (the command ran too long), not a fault
_REPEATABLE_POST = re.compile(
    r"^/(containers/[^/]+/(start|stop|restart|exec)|images/create|networks/create"
    r"|volumes/create)$"
)
_CONTAINER_CREATE = "/containers/create"


class _Answer(Exception):
    """An engine's answer worth another attempt, carried to the policy's classifier."""

    def __init__(self, response: requests.Response, transient: Transient) -> None:
        super().__init__(transient.why)
        self.response = response
        self.transient = transient


def path_of(url: str) -> str:
    return _VERSION.sub("", urlsplit(url).path)


def _caused_by(
    exc: BaseException, kinds: type[BaseException] | tuple[type[BaseException], ...]
) -> bool:
    """Whether ``exc`` or anything it carries (args, cause, context, urllib3's reason) is
    one of ``kinds``."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, kinds):
            return True
        stack += [a for a in current.args if isinstance(a, BaseException)]
        for linked in (current.__cause__, current.__context__, getattr(current, "reason", None)):
            if isinstance(linked, BaseException):
                stack.append(linked)
    return False


def _unsent(exc: BaseException) -> bool:
    """Whether the connection carrying the request never opened (nothing reached the
    engine): a refused or missing socket, a failed SSH channel, a connect timeout."""
    return _caused_by(
        exc,
        (
            urllib3.exceptions.NewConnectionError,
            urllib3.exceptions.ConnectTimeoutError,
            requests.exceptions.ConnectTimeout,
            ConnectionRefusedError,
            FileNotFoundError,
        ),
    )


def connection_fault(exc: BaseException) -> Transient | None:
    """A transport failure (no answer, a cut connection, a timeout), else None. A socket
    that does not exist is not one: no retry makes it appear (the connection says so,
    :func:`~shipway.backends.docker.connection.socket_problem`)."""
    if _caused_by(exc, FileNotFoundError):
        return None
    if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
        return Transient(f"a connection error ({type(exc).__name__}: {exc})")
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return Transient(f"a cut answer ({exc})")
    return None


def transient_call(exc: BaseException) -> Transient | None:
    """What a whole repeatable command (its several calls) may be run again after: an
    engine's 429/5xx answer, or a connection fault."""
    if isinstance(exc, _Answer):
        return exc.transient
    if isinstance(exc, docker.errors.APIError) and exc.status_code in RETRIED_STATUS:
        response = exc.response
        after = retry_after_seconds(response.headers.get("Retry-After")) if response else None
        return Transient(f"{exc.status_code} from the engine", after)
    return connection_fault(exc)


def _answer_fault(response: requests.Response) -> Transient:
    return Transient(
        f"{response.status_code} {response.reason or ''}".strip(),
        retry_after_seconds(response.headers.get("Retry-After")),
    )


def _resendable(kwargs: Mapping[str, Any]) -> bool:
    data = kwargs.get("data")
    return data is None or isinstance(data, str | bytes | bytearray)


def _synthetic(url: str, status: int, body: Any = None) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.url = url
    response._content = b"" if body is None else json.dumps(body).encode()
    response.headers["Content-Type"] = "application/json"
    return response


#: the base URL docker-py gives a client of a Unix socket or of an SSH connection
LOCAL_OR_SSH = "http+docker://"


class RetryingAPIClient(docker.APIClient):
    """docker-py's API client, each call retried as its kind allows (see the module)."""

    def __init__(self, *args: Any, policy: RetryPolicy, **kwargs: Any) -> None:
        self.retry_policy = policy  # before the base class, whose "auto" version asks
        super().__init__(*args, **kwargs)
        if self.base_url.startswith(LOCAL_OR_SSH):
            # requests reads the environment's proxies and ~/.netrc again for every call
            # (a fifth to two fifths of the client's CPU for a small one, measured by
            # bench/docker_client_cpu.py): neither applies to a Unix socket or shipway's
            # own SSH channels. An engine reached over TCP keeps them.
            self.trust_env = False

    def request(  # type: ignore[override]
        self, method: str, url: str, *args: Any, **kwargs: Any
    ) -> requests.Response:
        verb, path = method.upper(), path_of(url)
        send: Callable[[], requests.Response] = lambda: super(RetryingAPIClient, self).request(  # noqa: E731
            method, url, *args, **kwargs
        )
        if not _resendable(kwargs):
            return send()
        what = f"{verb} {path}"
        if (
            verb in ("GET", "HEAD")
            or verb in ("PUT", "DELETE")
            or (verb == "POST" and _REPEATABLE_POST.match(path))
        ):
            return self._repeat(send, url, what, deletes=verb == "DELETE")
        name = (kwargs.get("params") or {}).get("name")
        if verb == "POST" and path == _CONTAINER_CREATE and name:
            return self._create(send, url, str(name), kwargs)
        return self._once_unless_refused(send, what)

    def _run(
        self,
        once: Callable[[], requests.Response],
        classify: Callable[[BaseException], Any],
        what: str,
    ) -> requests.Response:
        try:
            return self.retry_policy.call(once, classify, what=what)
        except _Answer as answer:  # attempts ran out: the engine's own answer, as it was
            mark_gave_up(answer.response, answer)
            return answer.response

    def _repeat(
        self, send: Callable[[], requests.Response], url: str, what: str, *, deletes: bool
    ) -> requests.Response:
        attempts = 0

        def once() -> requests.Response:
            nonlocal attempts
            attempts += 1
            response = send()
            if deletes and attempts > 1 and response.status_code == 404:
                return _synthetic(url, 204)  # an earlier attempt deleted it
            if response.status_code in RETRIED_STATUS:
                _ = response.content  # keep the engine's words for a final answer
                raise _Answer(response, _answer_fault(response))
            return response

        return self._run(once, transient_call, what)

    def _once_unless_refused(
        self, send: Callable[[], requests.Response], what: str
    ) -> requests.Response:
        def once() -> requests.Response:
            response = send()
            if response.status_code in REFUSED_BEFORE_ACTING:
                _ = response.content
                raise _Answer(response, _answer_fault(response))
            return response

        def classify(exc: BaseException) -> Transient | None:
            if isinstance(exc, _Answer):
                return exc.transient
            return connection_fault(exc) if _unsent(exc) else None

        return self._run(once, classify, what)

    def _create(
        self, send: Callable[[], requests.Response], url: str, name: str, kwargs: Mapping[str, Any]
    ) -> requests.Response:
        sent = kwargs.get("data")
        wanted: dict[str, str] = (json.loads(sent) if sent else {}).get("Labels") or {}
        unknown = False  # an earlier attempt may have landed: inspect before sending

        def once() -> requests.Response:
            nonlocal unknown
            if unknown:
                found = self._landed(url, name, wanted)
                if found is not None:
                    return found
                unknown = False
            try:
                response = send()
            except requests.exceptions.RequestException as exc:
                unknown = not _unsent(exc) and connection_fault(exc) is not None
                raise
            if response.status_code in RETRIED_STATUS:
                _ = response.content
                unknown = response.status_code not in REFUSED_BEFORE_ACTING
                raise _Answer(response, _answer_fault(response))
            return response

        def classify(exc: BaseException) -> Transient | None:
            if isinstance(exc, _Answer):
                return exc.transient
            if unknown or _unsent(exc):
                return connection_fault(exc) or transient_call(exc)
            return None

        return self._run(once, classify, f"creating container {name}")

    def _landed(self, url: str, name: str, labels: Mapping[str, str]) -> requests.Response | None:
        """The answer a create of ``name`` would have given, when it landed: the container
        of that name carries every label sent. None when there is none (it did not
        land) or it is someone else's (the next attempt hears the conflict)."""
        inspect = (
            urlsplit(url)
            ._replace(path=url_path(url, f"/containers/{name}/json"), query="")
            .geturl()
        )
        response = super().request("GET", inspect, timeout=self.timeout)
        if response.status_code in RETRIED_STATUS:
            _ = response.content
            raise _Answer(response, _answer_fault(response))
        if response.status_code != 200:
            return None
        found = response.json()
        live = (found.get("Config") or {}).get("Labels") or {}  # the image's labels too
        if labels and all(live.get(k) == v for k, v in labels.items()):
            return _synthetic(url, 201, {"Id": found["Id"], "Warnings": []})
        return None


def url_path(url: str, path: str) -> str:
    """``path`` under the API version prefix ``url`` uses (``/v1.41/…``)."""
    found = _VERSION.match(urlsplit(url).path)
    return (found.group(0) if found else "") + path


class RetryingDockerClient(docker.DockerClient):
    """docker-py's client on a :class:`RetryingAPIClient`."""

    def __init__(self, policy: RetryPolicy, *args: Any, **kwargs: Any) -> None:
        self.api = RetryingAPIClient(*args, policy=policy, **kwargs)
