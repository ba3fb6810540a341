"""The health gate of a unit on its host, and the probes it makes.

A new container gets traffic only once its gate passed (the proxy's route is a separate,
later unit). What must never happen: a crashed, OOM-killed or restarting container counted
as ready, or a wait that outlives its deadline.

Probes are made through the host's connection (:meth:`HostConnection.dial`), so the check
sees the container exactly where the proxy will send traffic: its address on the slot's
network. HTTP: healthy on a 2xx or 3xx answer. TCP: healthy when the port accepts.

The gate follows the engine's events (:class:`Events`: ``start``, ``die``, ``oom``,
``restart`` of the gated containers) rather than inspecting each container every 0.15 s: a
container is inspected when the gate begins, when an event names it, and once more before
an uptime gate says ready; between events only the probes are made, at their interval.
When the engine's event stream cannot be had, the gate polls as before.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from shipway.backends.docker import container_logs, render
from shipway.backends.docker.connection import HostConnection, Stream
from shipway.backends.protocol import Failure, Reason
from shipway.release.artifact import Unit

Dial = Callable[[str, int, float], Stream]
#: seconds between two looks at a gated container when no event stream is had
POLL = 0.15
#: the events that change what a gate sees of a container
EVENTS = ("start", "die", "oom", "restart", "destroy", "pause", "unpause")


class Events:
    """The engine's events for some containers, read by a thread of its own: ``wait``
    returns the names an event came for (all of them, after ``POLL``, when the stream is
    broken or could not be opened: the gate then polls)."""

    def __init__(self, client: docker.DockerClient, names: Sequence[str]) -> None:
        self.names = set(names)
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.stream: Any = None
        try:
            self.stream = client.events(
                filters={"type": "container", "container": list(names), "event": list(EVENTS)},
                decode=True,
            )
        except docker.errors.DockerException:
            self.stream = None
        if self.stream is not None:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                actor = (event.get("Actor") or {}).get("Attributes") or {}
                self.queue.put(str(actor.get("name") or ""))
        except Exception:  # the stream broke (or was closed): the gate polls from now on
            pass
        self.queue.put(None)

    def wait(self, timeout: float) -> set[str]:
        if self.stream is None:
            time.sleep(min(timeout, POLL))
            return set(self.names)
        try:
            first = self.queue.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return set()
        touched = {first}
        with contextlib.suppress(queue.Empty):
            while True:
                touched.add(self.queue.get_nowait())
        if None in touched:
            self.stream = None  # ended: poll from now on
            return set(self.names)
        return {n for n in touched if n}

    def close(self) -> None:
        if self.stream is not None:
            with contextlib.suppress(Exception):
                self.stream.close()


@contextlib.contextmanager
def events(client: docker.DockerClient, names: Sequence[str]) -> Iterator[Events]:
    """The gated containers' events, opened before they are first inspected (so no event
    between the inspection and the stream is lost), closed on every path."""
    watch = Events(client, names)
    try:
        yield watch
    finally:
        watch.close()


def http_probe(
    dial: Dial, ip: str, port: int, path: str, timeout: float, host: str | None = None
) -> tuple[bool, str]:
    """GET ``path`` with ``host`` as its ``Host`` (the container's ``ip:port`` if None)."""
    try:
        conn = dial(ip, port, timeout)
    except ConnectionRefusedError:
        return False, f"GET {path}: connection refused (nothing listens on port {port} yet)"
    except OSError as exc:
        return False, f"GET {path}: cannot connect: {exc}"
    try:
        conn.sendall(
            f"GET {path} HTTP/1.0\r\nHost: {host or f'{ip}:{port}'}\r\n"
            "User-Agent: shipway-healthcheck\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n" not in head and len(head) < 8192:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
    except OSError as exc:  # timeouts included
        return False, f"GET {path}: {type(exc).__name__}: {exc or 'no answer'}"
    finally:
        conn.close()
    line = head.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = line.split()
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return False, f"GET {path}: not an HTTP answer ({line[:60]!r})"
    status = int(parts[1])
    return 200 <= status < 400, f"GET {path} answered {status}"


def tcp_probe(dial: Dial, ip: str, port: int, timeout: float) -> tuple[bool, str]:
    try:
        conn = dial(ip, port, timeout)
    except ConnectionRefusedError:
        return False, f"port {port}: connection refused"
    except OSError as exc:
        return False, f"port {port}: {exc}"
    conn.close()
    return True, f"port {port} accepts connections"


class Gate:
    """The health gate of one unit (a container or the proxy) on one host."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit
        body = unit.body
        if unit.kind == "proxy":
            self.health: dict[str, Any] = dict(render.TCP_CHECK)
            self.port: int | None = int(body.get("listen", 80))
        else:
            self.health = dict(body.get("health") or {"mode": "uptime", "initial_delay": 1.0})
            self.port = body.get("port")
        self.name = str(body["name"])
        self.network = str(body["network"])
        self.ready = False
        self.last = "not checked yet"
        self.failed_attempts = 0
        self.next_probe = 0.0
        #: the container as last inspected (None: inspect at the next look)
        self.seen: Container | None = None
        #: time.monotonic() of the next look this gate needs without an event (None: only
        #: an event, e.g. the ``start`` of a container still created, moves it on)
        self.due: float | None = 0.0

    def look(
        self, client: docker.DockerClient, conn: HostConnection, process: str, inspect: bool
    ) -> Failure | None:
        """One look at the unit: a Failure once it is doomed (gone, exited, restarted,
        OOM-killed, or out of health-check attempts), else None; ``ready`` says whether it
        passed. ``inspect``: read the container again (an event named it), else use what
        was last read. A probe is made no sooner than its interval after the last failed one."""
        fresh = inspect or self.seen is None
        if fresh:
            try:
                self.seen = client.containers.get(self.name)
            except docker.errors.NotFound:
                return Failure(Reason.NOT_FOUND, f"container {self.name} is gone", process)
        c = self.seen
        assert c is not None
        self.due = None
        state = c.attrs.get("State") or {}
        status = str(state.get("Status"))
        doomed = crashed(client, c, process)
        if doomed is not None:
            return doomed
        if status != "running":
            self.last = f"container is {status}"
            return None
        started = _started(state)
        now = datetime.now(UTC)
        up_for = (now - started).total_seconds() if started else 0.0
        mode = self.health.get("mode")
        delay = float(self.health.get("initial_delay") or 0.0)
        if mode == "uptime" or self.port is None:
            self.last = f"up for {up_for:.1f}s"
            needed = max(delay, render.MIN_UPTIME)
            if up_for >= needed and not fresh:
                self.seen, self.due = None, 0.0  # its time is up: read it once more first
                return None
            self.ready = up_for >= needed
            self.due = time.monotonic() + max(needed - up_for, 0.0)
            return None
        if up_for < delay:
            self.due = time.monotonic() + (delay - up_for)
            return None
        if time.monotonic() < self.next_probe:
            self.due = self.next_probe
            return None
        networks = (c.attrs.get("NetworkSettings") or {}).get("Networks") or {}
        ip = (networks.get(self.network) or {}).get("IPAddress")
        if not ip:
            self.last = f"no address on network {self.network} yet"
            self.seen, self.due = None, time.monotonic() + POLL
            return None
        timeout = float(self.health.get("timeout") or 1.0)
        if mode == "http":
            path, host = str(self.health["path"]), self.health.get("host")
            ok, why = http_probe(conn.dial, ip, int(self.port), path, timeout, host)
        else:
            ok, why = tcp_probe(conn.dial, ip, int(self.port), timeout)
        self.last = why
        if ok:
            self.ready = True
            return None
        self.failed_attempts += 1
        self.next_probe = time.monotonic() + float(self.health.get("interval") or 1.0)
        self.due = self.next_probe
        if self.failed_attempts >= int(self.health.get("attempts") or 30):
            return Failure(
                reason=Reason.HEALTHCHECK_FAILED,
                message=f"{self.name}: {why} ({self.failed_attempts} attempts)",
                process=process,
                details=tuple(container_logs.failure_tail(c)),
            )
        return None


def crashed(client: docker.DockerClient, c: Container, process: str) -> Failure | None:
    """The container's failure if it exited, died, restarted or is restarting (OOM-killed
    said so), with its last exit code and the tail of its log; else None."""
    state = c.attrs.get("State") or {}
    status = str(state.get("Status"))
    restarts = int(c.attrs.get("RestartCount") or 0)
    if status not in ("exited", "dead") and not restarts and not state.get("Restarting"):
        return None
    return Failure(
        reason=Reason.OOM_KILLED if state.get("OOMKilled") else Reason.CRASHED,
        message=f"container {c.name} {status} (restarts: {restarts})",
        process=process,
        exit_code=_last_exit_code(client, c, state),
        details=tuple(container_logs.failure_tail(c)),
    )


def watched_crash(
    client: docker.DockerClient, units: Sequence[Unit], names: set[str]
) -> Failure | None:
    """The first of ``units`` (containers gated later, named in ``names``) that crashed,
    read afresh; a container already gone is left to its own gate."""
    for unit in units:
        name = str(unit.body["name"])
        if name not in names:
            continue
        try:
            c = client.containers.get(name)
        except docker.errors.NotFound:
            continue
        failure = crashed(client, c, str(unit.process))
        if failure is not None:
            return failure
    return None


def _started(state: Mapping[str, Any]) -> datetime | None:
    raw = str(state.get("StartedAt") or "")
    if not raw or raw.startswith("0001-"):
        return None
    # Docker gives nanoseconds: 2024-01-01T00:00:00.123456789Z
    head, _, frac = raw.rstrip("Z").partition(".")
    try:
        base = datetime.fromisoformat(head).replace(tzinfo=UTC)
    except ValueError:
        return None
    micros = int((frac + "000000")[:6]) if frac.isdigit() else 0
    return base.replace(microsecond=micros)


def _last_exit_code(
    client: docker.DockerClient, c: Container, state: Mapping[str, Any]
) -> int | None:
    """The code its last run exited with. A container the engine already started again
    shows ``ExitCode`` 0 (its current run's): the engine's last ``die`` event of it keeps
    the code."""
    code = state.get("ExitCode")
    if state.get("Status") in ("exited", "dead") or not int(c.attrs.get("RestartCount") or 0):
        return int(code) if code is not None else None
    created = _started({"StartedAt": c.attrs.get("Created")})
    since = int(created.timestamp()) - 1 if created else None
    found: int | None = None
    try:
        events = client.events(
            since=since,
            until=int(time.time()) + 1,
            filters={"container": c.id, "event": "die"},
            decode=True,
        )
        try:
            for event in events:
                exit_code = ((event.get("Actor") or {}).get("Attributes") or {}).get("exitCode")
                if exit_code is not None and str(exit_code).lstrip("-").isdigit():
                    found = int(exit_code)
        finally:
            events.close()
    except docker.errors.DockerException:
        pass
    return found if found is not None else (int(code) if code is not None else None)
