"""The release command (migrations): run once in the new release's snapshot with the env
its processes get (:mod:`.environment`), after the snapshot is made and BEFORE any program
of the release starts; its output streamed (secret values masked) and kept in
``logs/_release-r<N>.log`` (0600: the command's own output may hold a secret). A secret's
``$NAME`` is never expanded in its words.

What must never happen: a release command left running, or two at once. It runs in a
session of its own, so everything it starts (a shell's children, their children) is found
again: on its timeout (``app.release_timeout``) or the deploy's deadline, and when the
deploy is interrupted, the whole session is stopped (SIGTERM, then SIGKILL). Its process
is marked in ``run/release-command.json`` while it runs (pid, boot id, pid namespace, start
time), and the command does not start before its mark is written (it waits at a gate on
its stdin); a deploy killed with SIGKILL leaves the mark, and the next release command first
stops what is still running of that session — only when the mark proves it is that one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from shipway.backends.liveness import ProcessMark, pid_alive, process_start, session_members
from shipway.backends.local import logfiles, masks, snapshot
from shipway.backends.local.dirs import (
    SlotDirs,
    private_log,
    private_logs,
    read_json,
    write_json,
    writing,
)
from shipway.backends.local.environment import LocalEnvironment
from shipway.backends.local.launch import expand
from shipway.backends.local.state import LOG_TAIL
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.guard import Clearance
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Masker, Secret

#: how long the release command's session has after SIGTERM before SIGKILL
STOP_GRACE = 2.0


#: what the release command's session runs first: it waits for one line on its stdin
#: (written once its mark is), then becomes the command with stdin from /dev/null; on
#: end-of-file (the deploy died before the mark) it exits without running it
GATE = 'read -r _ || exit 97; exec "$@" </dev/null'


def _runnable(program: str, cwd: Path | str, env: Mapping[str, str]) -> bool:
    """Whether ``program`` names an executable file (a path from ``cwd``, else on PATH)."""
    if "/" in program:
        path = Path(cwd, program)
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(program, path=env.get("PATH", os.defpath)) is not None


def _mark_file(d: SlotDirs) -> Path:
    return d.run / "release-command.json"


def stop_session(leader: int, started: str, grace: float = STOP_GRACE) -> list[int]:
    """Stop every process of the session ``leader`` started (SIGTERM, and SIGKILL to those
    still there after ``grace``); the pids it found."""
    found = session_members(leader, started)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and session_members(leader, started):
        time.sleep(0.05)  # the grace a process gets to end on SIGTERM, not a stand-in
    for pid in session_members(leader, started):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return found


def _kept(chunks: Iterator[bytes], out: BinaryIO) -> Iterator[bytes]:
    """``chunks``, each written to ``out`` (the command's log) as it passes."""
    for chunk in chunks:
        out.write(chunk)
        yield chunk


class LocalReleaseCommand(LocalEnvironment):
    """The release command step."""

    def run_release_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        command: Sequence[str],
        secrets: Mapping[str, Secret],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        d = self._guarded(clearance, target)
        self._secrets.update(secrets)
        self._stop_left_running(d, reporter)
        release_env = self._environment(d, release, None, secrets, "release")
        cwd, env = release_env.cwd, dict(release_env.env)
        masks.remember(d, (s.reveal() for s in secrets.values()))  # its log holds them
        words = [expand(w, env, keep=secrets.keys()) for w in command]  # never a secret in argv
        private_logs(d.logs)
        log = d.logs / f"_release-r{release.revision}.log"
        private_log(log)
        redact = self._redactor(d)
        if not _runnable(words[0], cwd, env):
            return Failure(
                reason=Reason.RELEASE_COMMAND_FAILED,
                message=f"cannot run {words[0]!r}: no such executable file (the release's "
                "PATH and directory searched)",
            )
        # the command waits at GATE until its mark is written: a deploy killed between the
        # two leaves no command running unmarked (its gate reads end-of-file: it exits)
        proc = subprocess.Popen(
            ["/bin/sh", "-c", GATE, "shipway-release-command", *words],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session: all it starts is found again
        )
        started = process_start(proc.pid)
        mark = ProcessMark.mine()
        try:
            write_json(
                _mark_file(d),
                {
                    "revision": release.revision,
                    "pid": proc.pid,
                    "host": mark.host,
                    "boot": mark.boot,
                    "pid_ns": mark.pid_ns,
                    "start": started,
                },
                0o600,
            )
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.close()  # the gate opens: the command runs, marked
            failure = self._watch(proc, started, command, log, reporter, redact, deadline)
            if failure is None:  # what it wrote in the snapshot is build output, not data
                snapshot.remember_built(cwd)
            return failure
        except BaseException:  # interrupted (a signal), or the lock lost: stop it all
            stopped = stop_session(proc.pid, started)
            if stopped:
                reporter.line(f"  release command stopped ({len(stopped)} processes)")
            raise
        finally:
            # what it left behind in its session (a process it put in the background) ends
            # with it: nothing of a release command outlives its step
            stop_session(proc.pid, started, grace=0.5)
            if proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()  # the gate never opened: the command never runs
            proc.wait()
            with contextlib.suppress(FileNotFoundError):
                _mark_file(d).unlink()

    def _stop_left_running(self, d: SlotDirs, reporter: Reporter) -> None:
        """Stop what is still running of a release command a killed deploy left: under the
        slot's lock none can be this operation's. Only processes its mark proves to be
        that session's are signalled (this kernel and pid namespace; the session's leader
        gone, or still the process the mark names)."""
        left = read_json(_mark_file(d))
        if not isinstance(left, dict):
            return
        try:
            mark = ProcessMark(
                host=str(left["host"]),
                pid=int(left["pid"]),
                boot=str(left["boot"]),
                pid_ns=str(left["pid_ns"]),
                start=str(left["start"]),
            )
        except (KeyError, TypeError, ValueError):
            mark = None
        here = ProcessMark.mine()
        if (
            mark is not None
            and mark.start
            and (mark.host, mark.boot, mark.pid_ns) == (here.host, here.boot, here.pid_ns)
            and (mark.runs_here() or not pid_alive(mark.pid))  # never a reused pid's
        ):
            stopped = stop_session(mark.pid, mark.start)
            if stopped:
                reporter.line(
                    f"  stopped the release command of r{left.get('revision', '?')} (pid "
                    f"{mark.pid}, {len(stopped)} processes) left running by an earlier "
                    "deploy that was killed before it could stop it"
                )
        with contextlib.suppress(FileNotFoundError):
            _mark_file(d).unlink()

    def _watch(
        self,
        proc: subprocess.Popen[bytes],
        started: str,
        command: Sequence[str],
        log: Path,
        reporter: Reporter,
        redact: Masker,
        deadline: float,
    ) -> Failure | None:
        """Stream its output until it exits, or stop its whole session at ``deadline``."""
        with writing(log), open(log, "wb") as out:
            for raw in logfiles.lines(_kept(logfiles.output(proc, deadline), out)):
                reporter.line(f"  release | {redact(raw.decode(errors='replace'))}")
        if proc.poll() is None:  # the deadline came first
            stop_session(proc.pid, started)
            proc.wait()
            return Failure(
                reason=Reason.RELEASE_COMMAND_TIMEOUT,
                message=f"{' '.join(command)} did not finish before the deadline",
                details=tuple(f"| {redact(t)}" for t in logfiles.tail(log, LOG_TAIL)),
            )
        code = proc.returncode
        if code != 0:
            return Failure(
                reason=Reason.RELEASE_COMMAND_FAILED,
                message=f"{' '.join(command)} exited with code {code}",
                exit_code=code,
                details=(
                    f"last lines of its output ({log}):",
                    *(f"| {redact(t)}" for t in logfiles.tail(log, LOG_TAIL)),
                ),
            )
        return None
