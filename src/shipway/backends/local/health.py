"""Health and readiness: when a just-started program counts as ready, or as failed, and
the probes behind it (plain HTTP GET and TCP connect on loopback).

The gate, per instance, failing fast:
  * ``http``: GET the path on the instance's port after ``initial_delay``, every
    ``interval``, each within ``timeout``; ready on 2xx/3xx, failed after ``attempts``;
  * ``tcp``: the same with a TCP connect (a port but no declared check);
  * ``uptime``: no port: ready once it has run ``initial_delay`` since its only start and
    has started (:func:`settled`: waiting for something, or busy for a while — never a
    process still runnable but unscheduled on a loaded machine, nor an unreaped zombie);
  * any crash while starting — a second start, or supervisord's BACKOFF / EXITED / FATAL —
    fails at once, with the exit code supervisord logged.

A failure names the process and shows the last lines of the instance's log, secret values
masked. ``status`` uses one probe of the same kind for its health column.
"""

from __future__ import annotations

import http.client
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from shipway.backends.excerpt import excerpt
from shipway.backends.local import logfiles
from shipway.backends.local.dirs import SlotDirs
from shipway.backends.local.records import Instance, ProgramRecord
from shipway.backends.local.state import LOG_TAIL, LocalState
from shipway.backends.local.supervisor import RUNNING_STATES, Supervisor, state_of
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.spec.model import Target

#: a process that never waits (CPU-bound) counts as started after this much CPU time
BUSY_CPU_SECONDS = 0.5


def still_running(info: Mapping[str, Any] | None) -> bool:
    """Whether the instance's process is alive now, whatever supervisord last saw. Under
    load supervisord may answer RUNNING for a process that has already exited and that it
    has not reaped yet (a zombie): an uptime gate must never count that one as ready."""
    return _proc_state(info) not in (None, "Z", "X")


def settled(info: Mapping[str, Any] | None) -> bool:
    """Whether the process has started, not merely been started: alive, and either waiting
    for something (sleeping — on a socket, a queue, a timer, a child) or having had
    ``BUSY_CPU_SECONDS`` of CPU. On a loaded machine a process can sit runnable, not yet
    scheduled, for longer than an uptime gate's window; one that would crash at once must
    never pass the window just because it had no CPU to crash with."""
    pid = int((info or {}).get("pid") or 0)
    fields = _proc_stat(pid)
    if fields is None:
        return still_running(info)
    state = fields[0]
    if state in ("S", "I"):
        return True
    if state in ("Z", "X"):
        return False
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    return cpu >= BUSY_CPU_SECONDS


def _proc_stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from its state field on (None: no such process, or no /proc)."""
    if pid <= 0:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()  # "pid (comm) S ...": comm may hold a ')'


def _proc_state(info: Mapping[str, Any] | None) -> str | None:
    """The process's one-letter state; "S" where /proc cannot tell but the pid exists;
    None when it does not."""
    pid = int((info or {}).get("pid") or 0)
    if pid <= 0:
        return None
    fields = _proc_stat(pid)
    if fields is not None:
        return fields[0]
    if Path("/proc/self/stat").exists():
        return None  # /proc works: the process is gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return "S"
    return "S"


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


def _listens(port: int) -> bool:
    """Something accepts connections on 127.0.0.1:port (a refusal comes back at once)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def tcp_probe(port: int, timeout: float) -> tuple[bool, str]:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True, f"port {port} accepts connections"
    except OSError as exc:
        return False, f"port {port}: {exc.strerror or exc}"


#: how long a crashed process's log may take to get what it printed before it exited
SETTLE = 2.0
SETTLE_PACE = 0.1


def log_settled(log: Path, most: float = SETTLE) -> None:
    """Wait until ``log`` holds what a crashed process printed before it exited: supervisord
    reads the process's output from its pipe in its own loop, which may see the exit (the
    state this gate read) before it has written the last lines. Settled: the file is not
    empty and did not grow over one pace; at most ``most`` seconds (a process that printed
    nothing costs that once, on a failure)."""
    deadline = time.monotonic() + most
    size = -1
    while time.monotonic() < deadline:
        now = log.stat().st_size if log.exists() else 0
        if now and now == size:
            return
        size = now
        time.sleep(SETTLE_PACE)  # the pace of looking at the file again


def crashed_start(inst: Instance, lines: Sequence[tuple[float | None, str]]) -> int:
    """How many of ``lines`` (``inst``'s log) the crash wrote: supervisord may have
    started it again before the gate told the crash (a second start is how it saw it). The
    later start's lines, stamped at or after its start (to the millisecond the stamps keep),
    would repeat the cause and end the tail with another start's lines. A stamp is when the
    stamper read the line: on a loaded machine the crash's own lines may be stamped after the
    later start, and then all are kept (the cause, maybe twice, rather than none)."""
    at = inst.started_at() if inst.starts() - inst.starts_before > 1 else None
    if at is None:
        return len(lines)
    for i, (stamped, _) in enumerate(lines):
        if stamped is not None and stamped >= at - 0.001:
            return i or len(lines)
    return len(lines)


#: builds the Failure for one instance: (instance, reason, message, exit code)
FailureOf = Callable[[Instance, str, str, int | None], Failure]


def _crash(
    supervisor: Supervisor, inst: Instance, info: Mapping[str, Any] | None, fail: FailureOf
) -> Failure | None:
    """The instance's failure if it crashed since it was started for this release (a
    second start, or supervisord's BACKOFF / EXITED / FATAL), or supervisord lost it."""
    state = state_of(info)
    # starts before this gate (an instance left running by a ``start``) do not count
    started_times = inst.starts() - inst.starts_before
    if started_times > 1 or state in ("BACKOFF", "EXITED", "FATAL"):
        code = supervisor.last_exit(inst.name)
        return fail(
            inst,
            Reason.CRASHED,
            f"the process exited{f' with code {code}' if code is not None else ''} "
            f"while starting (state {state}, started {max(started_times, 1)} times)",
            code,
        )
    if state == "ABSENT":
        return fail(inst, Reason.NOT_STARTED, "supervisord does not know it", None)
    return None


def health_gate(
    supervisor: Supervisor,
    rec: ProgramRecord,
    deadline: float,
    reporter: Reporter,
    fail: FailureOf,
    still_ours: Callable[[], None] = lambda: None,
    watched: Sequence[tuple[Instance, FailureOf]] = (),
) -> Failure | None:
    """Every instance of a program healthy (→ None), or the first failure: a crash while
    starting, a check failing all its attempts, or the deadline. ``still_ours`` raises
    when the slot's lock is lost meanwhile: the wait stops there. ``watched``: instances
    of the release gated later (after a switch this gate comes before); a crash of one
    fails this gate too, so nothing moves to a release already failing."""
    process = rec.process
    check = rec.health
    mode = check.mode
    instances = list(rec.instances)
    total = len(instances)
    started = time.monotonic()
    ready: set[str] = set()
    attempts: dict[str, int] = {}
    last: dict[str, str] = {}
    # when each instance's next counted probe is due: one per interval after the last one
    # ended, whatever the loop does between them (looking again at a port that refused
    # must never push a probe back: a process that listens but never accepts would then
    # hold the gate until the deadline instead of failing after its attempts)
    first = started + check.initial_delay if mode != "uptime" else 0.0
    due: dict[str, float] = {inst.name: first for inst in instances}
    refused: set[str] = set()  # instances on whose port nothing listened at their last probe

    def probe(port: int) -> tuple[bool, str]:
        if mode == "http":
            return http_probe(port, str(check.path), check.timeout)
        return tcp_probe(port, check.timeout)

    reporter.progress(process, {"ready": 0, "of": total})
    while len(ready) < total:
        still_ours()
        infos = supervisor.info()
        for other, fail_other in watched:
            crashed = _crash(supervisor, other, infos.get(other.name), fail_other)
            if crashed is not None:
                return crashed
        for inst in instances:
            name = inst.name
            if name in ready:
                continue
            info = infos.get(name)
            state = state_of(info)
            crashed = _crash(supervisor, inst, info, fail)
            if crashed is not None:
                return crashed
            if mode == "uptime":
                # up since its (only) start: the launcher wrote the counter then
                needed = check.initial_delay
                try:
                    up = time.time() - inst.counter.stat().st_mtime
                except OSError:
                    up = 0.0
                if state == "RUNNING" and up >= needed and settled(info):
                    ready.add(name)
                else:
                    last[name] = f"{state.lower()}, must stay up {needed:g}s"
                continue
            if time.monotonic() < due[name]:
                # nothing listened at the last probe: look again at the loop's pace, so an
                # app that is up is not kept waiting for the next interval. A refused
                # connect reaches no app; only a success counts here (a failure never comes
                # sooner: attempts stay one per interval)
                if name in refused and _listens(inst.port):
                    refused.discard(name)
                    if probe(inst.port)[0]:
                        ready.add(name)
                continue
            ok, why = probe(inst.port)
            due[name] = time.monotonic() + check.interval
            attempts[name] = attempts.get(name, 0) + 1
            last[name] = why
            if ok:
                ready.add(name)
                continue
            if not _listens(inst.port):
                refused.add(name)
            if attempts[name] >= check.attempts:
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
        self,
        target: Target,
        d: SlotDirs,
        rec: ProgramRecord,
        deadline: float,
        reporter: Reporter,
        watched: Sequence[ProgramRecord] = (),
    ) -> Failure | None:
        """The health gate on one program of the slot, for as long as the lock is ours;
        a crash of a ``watched`` program (gated later) fails it too."""
        return health_gate(
            self.supervisor,
            rec,
            deadline,
            reporter,
            self._fail_with(d, rec),
            lambda: self._still_ours(target),
            [(inst, self._fail_with(d, w)) for w in watched for inst in w.instances],
        )

    def _fail_with(self, d: SlotDirs, rec: ProgramRecord) -> FailureOf:
        """How a failure of one of ``rec``'s instances is told: the process, the reason, the
        first error-looking block of its log and its last lines, each once (secret values
        masked), and the command that shows the whole log."""
        redact = self._redactor(d)

        full = f"shipway logs {self.slot.name} {rec.process} --release {rec.revision}"

        def failure(inst: Instance, reason: str, message: str, code: int | None) -> Failure:
            if reason == Reason.CRASHED:
                log_settled(inst.log)
            lines = logfiles.read_lines(inst.log)
            cut = crashed_start(inst, lines)
            details = excerpt([redact(text) for _, text in lines[:cut]], LOG_TAIL).lines(
                str(inst.log), full
            )
            if cut < len(lines):
                details.insert(-1, f"(its log up to its start again, at line {cut + 1})")
            return Failure(
                reason=reason,
                message=message,
                process=rec.process,
                exit_code=code,
                details=tuple(details),
            )

        return failure
