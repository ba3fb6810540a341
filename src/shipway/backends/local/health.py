"""Health and readiness: when a just-started program counts as ready, or as failed, and
the probes behind it (plain HTTP GET and TCP connect on loopback).

The gate, per instance, failing fast:
  * ``http``: GET the path on the instance's port after ``initial_delay``, every
    ``interval``, each within ``timeout``; ready on 2xx/3xx, failed after ``attempts``;
  * ``tcp``: the same with a TCP connect (a port but no declared check);
  * ``uptime``: no port: ready once it has run ``initial_delay`` since its only start;
  * any crash while starting — a second start, or supervisord's BACKOFF / EXITED / FATAL —
    fails at once, with the exit code supervisord logged.

A failure names the process and shows the last lines of the instance's log, secret values
masked. ``status`` uses one probe of the same kind for its health column.
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Callable

from shipway.backends.excerpt import excerpt
from shipway.backends.local import logfiles
from shipway.backends.local.dirs import SlotDirs
from shipway.backends.local.model import Instance, ProgramRecord
from shipway.backends.local.state import LOG_TAIL, LocalState
from shipway.backends.local.supervisor import RUNNING_STATES, Supervisor, state_of
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.spec.model import Target


def http_probe(port: int, path: str, timeout: float) -> tuple[bool, str]:
    """GET ``path`` on 127.0.0.1:port. Healthy: a 2xx or 3xx answer within ``timeout``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"User-Agent": "shipway-healthcheck"})
        response = conn.getresponse()
        response.read(65536)
        ok = 200 <= response.status < 400
        return ok, f"GET {path} answered {response.status}"
    except ConnectionRefusedError:
        return False, f"GET {path}: connection refused (nothing listens on port {port} yet)"
    except TimeoutError:
        return False, f"GET {path}: no answer within {timeout:g}s"
    except (OSError, http.client.HTTPException) as exc:
        return False, f"GET {path}: {type(exc).__name__}: {exc}"
    finally:
        conn.close()


def tcp_probe(port: int, timeout: float) -> tuple[bool, str]:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True, f"port {port} accepts connections"
    except OSError as exc:
        return False, f"port {port}: {exc.strerror or exc}"


#: builds the Failure for one instance: (instance, reason, message, exit code)
FailureOf = Callable[[Instance, str, str, int | None], Failure]


def health_gate(
    supervisor: Supervisor,
    rec: ProgramRecord,
    deadline: float,
    reporter: Reporter,
    fail: FailureOf,
    still_ours: Callable[[], None] = lambda: None,
) -> Failure | None:
    """Every instance of a program healthy (→ None), or the first failure: a crash while
    starting, a check failing all its attempts, or the deadline. ``still_ours`` raises
    when the slot's lock is lost meanwhile: the wait stops there."""
    process = rec.process
    check = rec.health
    mode = check.mode
    instances = list(rec.instances)
    total = len(instances)
    started = time.monotonic()
    ready: set[str] = set()
    attempts: dict[str, int] = {}
    last: dict[str, str] = {}
    next_probe = started + check.initial_delay if mode != "uptime" else 0
    reporter.progress(process, {"ready": 0, "of": total})
    while len(ready) < total:
        still_ours()
        infos = supervisor.info()
        for inst in instances:
            name = inst.name
            if name in ready:
                continue
            info = infos.get(name)
            state = state_of(info)
            # starts before this gate (an instance left running by a ``start``) do not count
            started_times = inst.starts() - inst.starts_before
            if started_times > 1 or state in ("BACKOFF", "EXITED", "FATAL"):
                code = supervisor.last_exit(name)
                return fail(
                    inst,
                    Reason.CRASHED,
                    f"the process exited{f' with code {code}' if code is not None else ''} "
                    f"while starting (state {state}, started {max(started_times, 1)} times)",
                    code,
                )
            if state == "ABSENT":
                return fail(inst, Reason.NOT_STARTED, "supervisord does not know it", None)
            if mode == "uptime":
                # up since its (only) start: the launcher wrote the counter then
                needed = check.initial_delay
                try:
                    up = time.time() - inst.counter.stat().st_mtime
                except OSError:
                    up = 0.0
                if state == "RUNNING" and up >= needed:
                    ready.add(name)
                else:
                    last[name] = f"{state.lower()}, must stay up {needed:g}s"
                continue
            if time.monotonic() < next_probe:
                continue
            if mode == "http":
                ok, why = http_probe(inst.port, str(check.path), check.timeout)
            else:
                ok, why = tcp_probe(inst.port, check.timeout)
            attempts[name] = attempts.get(name, 0) + 1
            last[name] = why
            if ok:
                ready.add(name)
            elif attempts[name] >= check.attempts:
                what = "health check" if mode == "http" else "port check"
                return fail(
                    inst,
                    Reason.HEALTHCHECK_FAILED,
                    f"{why} — {what} failed {attempts[name]} times (every {check.interval:g}s)",
                    None,
                )
        note = next(iter(last.values()), "") if len(ready) < total else ""
        reporter.progress(process, {"ready": len(ready), "of": total}, note)
        if len(ready) == total:
            break
        if time.monotonic() > deadline:
            inst = next(i for i in instances if i.name not in ready)
            return fail(
                inst,
                Reason.TIMEOUT,
                f"not ready before the deadline ({last.get(inst.name, 'no answer')})",
                None,
            )
        if mode != "uptime" and time.monotonic() >= next_probe:
            next_probe = time.monotonic() + check.interval
        time.sleep(0.05)
    return None


class LocalHealth(LocalState):
    """The gate on a program's instances, and how their failures are told."""

    def _health_now(self, rec: ProgramRecord, inst: Instance, state: str) -> tuple[bool, str]:
        """One live probe of an instance, for ``status``."""
        if state not in RUNNING_STATES:
            return False, "down"
        check = rec.health
        if check.mode == "http":
            ok, why = http_probe(inst.port, str(check.path), 1.0)
            return ok, "ok" if ok else f"failing: {why}"
        if check.mode == "tcp":
            ok, why = tcp_probe(inst.port, 1.0)
            return ok, "ok" if ok else f"failing: {why}"
        return state == "RUNNING", "running" if state == "RUNNING" else state.lower()

    def _gate(
        self, target: Target, d: SlotDirs, rec: ProgramRecord, deadline: float, reporter: Reporter
    ) -> Failure | None:
        """The health gate on one program of the slot, for as long as the lock is ours."""
        return health_gate(
            self.supervisor,
            rec,
            deadline,
            reporter,
            self._fail_with(d, rec),
            lambda: self._still_ours(target),
        )

    def _fail_with(self, d: SlotDirs, rec: ProgramRecord) -> FailureOf:
        """How a failure of one of ``rec``'s instances is told: the process, the reason, the
        first error-looking block of its log and its last lines, each once (secret values
        masked), and the command that shows the whole log."""
        redact = self._redactor(d)

        full = f"shipway logs {self.slot.name} {rec.process} --release {rec.revision}"

        def failure(inst: Instance, reason: str, message: str, code: int | None) -> Failure:
            lines = [redact(text) for _, text in logfiles.read_lines(inst.log)]
            details = excerpt(lines, LOG_TAIL).lines(str(inst.log), full)
            return Failure(
                reason=reason,
                message=message,
                process=rec.process,
                exit_code=code,
                details=tuple(details),
            )

        return failure
