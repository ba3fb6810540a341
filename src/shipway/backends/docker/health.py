"""The health gate of a unit on its host, and the probes it makes.

A new container gets traffic only once its gate passed (the proxy's route is a separate,
later unit). What must never happen: a crashed, OOM-killed or restarting container counted
as ready, or a wait that outlives its deadline.

Probes are made through the host's connection (:meth:`HostConnection.dial`), so the check
sees the container exactly where the proxy will send traffic: its address on the slot's
network. HTTP: healthy on a 2xx or 3xx answer. TCP: healthy when the port accepts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
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


def http_probe(dial: Dial, ip: str, port: int, path: str, timeout: float) -> tuple[bool, str]:
    try:
        conn = dial(ip, port, timeout)
    except ConnectionRefusedError:
        return False, f"GET {path}: connection refused (nothing listens on port {port} yet)"
    except OSError as exc:
        return False, f"GET {path}: cannot connect: {exc}"
    try:
        conn.sendall(
            f"GET {path} HTTP/1.0\r\nHost: {ip}:{port}\r\nUser-Agent: shipway-healthcheck\r\n"
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

    def check(
        self, client: docker.DockerClient, conn: HostConnection, process: str
    ) -> Failure | None:
        """One look at the unit: a Failure once it is doomed (gone, exited, restarted,
        OOM-killed, or out of health-check attempts), else None; ``ready`` says whether it
        passed. A probe is made no sooner than its interval after the last failed one."""
        try:
            c: Container = client.containers.get(self.name)
        except docker.errors.NotFound:
            return Failure(Reason.NOT_FOUND, f"container {self.name} is gone", process)
        state = c.attrs.get("State") or {}
        status = str(state.get("Status"))
        if (
            status in ("exited", "dead")
            or int(c.attrs.get("RestartCount") or 0) > 0
            or state.get("Restarting")
        ):
            reason = Reason.OOM_KILLED if state.get("OOMKilled") else Reason.CRASHED
            return Failure(
                reason=reason,
                message=f"container {self.name} {status} (restarts: "
                f"{c.attrs.get('RestartCount') or 0})",
                process=process,
                exit_code=_last_exit_code(client, c, state),
                details=tuple(container_logs.failure_tail(c)),
            )
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
            self.ready = up_for >= max(delay, render.MIN_UPTIME)
            return None
        if up_for < delay or time.monotonic() < self.next_probe:
            return None
        networks = (c.attrs.get("NetworkSettings") or {}).get("Networks") or {}
        ip = (networks.get(self.network) or {}).get("IPAddress")
        if not ip:
            self.last = f"no address on network {self.network} yet"
            return None
        timeout = float(self.health.get("timeout") or 1.0)
        if mode == "http":
            ok, why = http_probe(conn.dial, ip, int(self.port), str(self.health["path"]), timeout)
        else:
            ok, why = tcp_probe(conn.dial, ip, int(self.port), timeout)
        self.last = why
        if ok:
            self.ready = True
            return None
        self.failed_attempts += 1
        self.next_probe = time.monotonic() + float(self.health.get("interval") or 1.0)
        if self.failed_attempts >= int(self.health.get("attempts") or 30):
            return Failure(
                reason=Reason.HEALTHCHECK_FAILED,
                message=f"{self.name}: {why} ({self.failed_attempts} attempts)",
                process=process,
                details=tuple(container_logs.failure_tail(c)),
            )
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
