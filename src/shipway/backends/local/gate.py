"""The health gate: when a just-started program counts as ready, or as failed.

Per instance, failing fast:
  * ``http``: GET the path on the instance's port after ``initial_delay``, every
    ``interval``, each within ``timeout``; ready on 2xx/3xx, failed after ``attempts``;
  * ``tcp``: the same with a TCP connect (a port but no declared check);
  * ``uptime``: no port: ready once it has run ``initial_delay`` since its only start;
  * any crash while starting — a second start, or supervisord's BACKOFF / EXITED / FATAL —
    fails at once, with the exit code supervisord logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from shipway.backends.local import health
from shipway.backends.local.model import Instance, ProgramRecord
from shipway.backends.local.supervisor import Supervisor, state_of
from shipway.backends.protocol import Failure, Reason, Reporter

#: builds the Failure for one instance: (instance, reason, message, exit code)
FailureOf = Callable[[Instance, str, str, int | None], Failure]


def health_gate(
    supervisor: Supervisor,
    rec: ProgramRecord,
    deadline: float,
    reporter: Reporter,
    fail: FailureOf,
) -> Failure | None:
    """Every instance of a program healthy (→ None), or the first failure: a crash while
    starting, a check failing all its attempts, or the deadline."""
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
                ok, why = health.http_probe(inst.port, str(check.path), check.timeout)
            else:
                ok, why = health.tcp_probe(inst.port, check.timeout)
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
