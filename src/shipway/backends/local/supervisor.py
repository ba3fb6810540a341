"""Driving supervisord: one daemon per state directory, over XML-RPC on a unix socket.

supervisord does the supervision (detached from the CLI, restarts on crash, log files,
process groups); this module only starts it on first use, adds and removes programs
(one include file per program, then ``reloadConfig`` + ``addProcessGroup``) and reads
their state. Reading never starts anything: when the daemon is not running, nothing is.

Errors from the socket or from supervisord become :class:`BackendError` here, after the
shared retry policy (:mod:`shipway.backends.retry`) tried the call again where it may be:
reads and the calls whose repeat does what the first did (``reloadConfig``, starting,
stopping and removing a group: supervisord's "already started", "not running" and "bad
name" answers are what those callers already accept) on a connection reset or cut, or an
HTTP error from the daemon. ``addProcessGroup`` is repeated only after the daemon's list of
groups showed the first attempt did not land (a blind repeat after a lost answer would
remove and add the program again); ``shutdown`` never is; and a socket refusing a connect
is a daemon not running, not a passing fault.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import xmlrpc.client
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from shipway.backends import retry
from shipway.backends.local.dirs import file_lock, private_dir, socket_path, write_atomic
from shipway.backends.retry import RetryPolicy, Transient
from shipway.errors import BackendError

# supervisord fault codes (supervisor.xmlrpc.Faults)
BAD_NAME = 10
NOT_RUNNING = 70
ALREADY_STARTED = 60
ALREADY_ADDED = 90
STILL_RUNNING = 91

RUNNING_STATES = frozenset({"STARTING", "RUNNING", "BACKOFF"})
#: a program in one of these is stopped (ABSENT: supervisord does not know it)
STOPPED_STATES = frozenset({"STOPPED", "EXITED", "FATAL", "ABSENT"})
#: a program's stopwaitsecs unless it says otherwise (the router's is longer)
STOPWAITSECS = 10
#: seconds between two looks at a program being stopped, and past its stopwaitsecs before
#: a stop waits as supervisord does
STOP_LOOK = 0.05
STOP_MARGIN = 5.0
START_TIMEOUT = 15.0
RPC_TIMEOUT = 30.0
#: supervisord's fault code for a call made while it shuts down (supervisor.xmlrpc.Faults)
_SHUTDOWN_STATE = 6

#: what the daemon (and so every program it starts) inherits from the environment of the
#: shipway that started it; nothing else — in particular no secret the user exported.
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")

#: the calls a repeat of which does what the first did
REPEATABLE = frozenset(
    {
        "getState",
        "getAllProcessInfo",
        "getProcessInfo",
        "reloadConfig",
        "startProcessGroup",
        "stopProcessGroup",
        "removeProcessGroup",
    }
)


def transient_rpc(exc: BaseException) -> Transient | None:
    """A fault of the conversation with supervisord (not one of its own answers)."""
    if isinstance(exc, xmlrpc.client.Fault):
        return None
    if isinstance(exc, xmlrpc.client.ProtocolError):
        return Transient(f"HTTP {exc.errcode} {exc.errmsg}")
    if isinstance(exc, ConnectionRefusedError | FileNotFoundError):
        return None  # nothing listens: the daemon is not running, not a passing fault
    if isinstance(exc, OSError | http.client.HTTPException):
        return Transient(f"a connection error ({type(exc).__name__}: {exc or 'no detail'})")
    return None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class _UnixTransport(xmlrpc.client.Transport):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__()
        self._path = path
        self._timeout = timeout

    def make_connection(self, host: Any) -> http.client.HTTPConnection:
        return _UnixConnection(self._path, self._timeout)

    def request(self, host: Any, handler: Any, request_body: Any, verbose: bool = False) -> Any:
        """One attempt: the standard library's transport quietly sends a call again after
        a reset — ``addProcessGroup`` included — while whether a call may be repeated is
        the retry policy's to decide (:func:`transient_rpc`, :data:`REPEATABLE`)."""
        return self.single_request(host, handler, request_body, verbose)


def _escape(value: str) -> str:
    """supervisord reads its config through ConfigParser interpolation: '%' must double."""
    return value.replace("%", "%%")


def program_conf(
    name: str,
    command: Sequence[str],
    directory: Path,
    logfile: Path,
    *,
    autostart: bool = True,
    startsecs: int = 1,
    startretries: int = 30,
    stopwaitsecs: int = STOPWAITSECS,
    stopsignal: str = "TERM",
) -> str:
    if any("\n" in w or "\r" in w for w in command):
        raise BackendError(f"the command of {name} contains a line break, which cannot be run")
    lines = [
        f"[program:{name}]",
        f"command={_escape(shlex.join(command))}",
        f"directory={_escape(str(directory))}",
        f"autostart={'true' if autostart else 'false'}",
        "autorestart=true",
        f"startsecs={startsecs}",
        f"startretries={startretries}",
        f"stopsignal={stopsignal}",
        f"stopwaitsecs={stopwaitsecs}",
        "stopasgroup=true",
        "killasgroup=true",
        "redirect_stderr=true",
        f"stdout_logfile={_escape(str(logfile))}",
        "stdout_logfile_maxbytes=10MB",
        "stdout_logfile_backups=3",
        "",
    ]
    return "\n".join(lines)


class Supervisor:
    """The supervisord of one state directory."""

    def __init__(self, directory: Path, policy: RetryPolicy | None = None) -> None:
        self.dir = directory
        self.policy = policy or RetryPolicy()
        self.conf = directory / "supervisord.conf"
        self.pidfile = directory / "supervisord.pid"
        self.logfile = directory / "supervisord.log"
        self.programs = directory / "programs"
        self.sock = socket_path(directory / "supervisor.sock")

    # -- connection ----------------------------------------------------------------

    def _proxy(self, timeout: float = RPC_TIMEOUT) -> Any:
        transport = _UnixTransport(str(self.sock), timeout)
        return xmlrpc.client.ServerProxy("http://localhost", transport=transport).supervisor

    def _call(
        self,
        method: str,
        *args: Any,
        timeout: float = RPC_TIMEOUT,
        landed: Callable[[], bool] | None = None,
    ) -> Any:
        """``method(*args)``, retried when it may be: a repeatable one after any fault of
        the conversation; another, with ``landed`` (did the call take effect?), after such
        a fault only once ``landed`` said it did not — and when it says it did, that is
        the answer."""
        unknown = False

        def once() -> Any:
            nonlocal unknown
            if unknown and landed is not None:
                if landed():
                    return True
                unknown = False
            try:
                return getattr(self._proxy(timeout), method)(*args)
            except Exception as exc:
                unknown = landed is not None and transient_rpc(exc) is not None
                raise

        def classify(exc: BaseException) -> Transient | None:
            if method in REPEATABLE or unknown:
                return transient_rpc(exc)
            return None

        try:
            return self.policy.call(once, classify, what=f"supervisord {method}")
        except xmlrpc.client.Fault:
            raise
        except (OSError, http.client.HTTPException, xmlrpc.client.ProtocolError) as exc:
            raise BackendError(
                f"supervisord ({self.sock}) did not answer {method}: {exc}{retry.gave_up(exc)}"
            ) from exc

    def running(self) -> bool:
        """True when the daemon answers. Never starts it. A connection cut or reset is
        asked again (a daemon that answered badly once is not a daemon that is gone, and
        starting a second one beside it must never happen); a socket nobody listens on is a
        daemon not running."""
        if not self.sock.exists():
            return False
        try:
            state = self.policy.call(
                lambda: self._proxy(2.0).getState(),
                transient_rpc,
                what="supervisord getState",
                budget=5.0,
            )
        except (OSError, http.client.HTTPException, xmlrpc.client.Error):
            return False
        return bool(state.get("statename") == "RUNNING")

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    # -- lifecycle -----------------------------------------------------------------

    def _config(self) -> str:
        sock = _escape(str(self.sock))
        return "\n".join(
            [
                "; written by shipway: the supervisor of this state directory",
                "[unix_http_server]",
                f"file={sock}",
                "chmod=0700",
                "",
                "[supervisord]",
                f"logfile={_escape(str(self.logfile))}",
                "logfile_maxbytes=5MB",
                "logfile_backups=2",
                f"pidfile={_escape(str(self.pidfile))}",
                f"childlogdir={_escape(str(self.dir / 'childlogs'))}",
                f"directory={_escape(str(self.dir))}",
                "umask=022",
                "",
                "[rpcinterface:supervisor]",
                "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
                "",
                "[supervisorctl]",
                f"serverurl=unix://{sock}",
                "",
                "[include]",
                f"files={_escape(str(self.programs))}/*.conf",
                "",
            ]
        )

    def ensure(self) -> bool:
        """Start the daemon unless it runs. Returns True when this call started it."""
        if self.running():
            return False
        private_dir(self.dir)
        with file_lock(self.dir / "start.lock"):
            if self.running():
                return False
            self.programs.mkdir(exist_ok=True)
            (self.dir / "childlogs").mkdir(exist_ok=True)
            private_dir(self.sock.parent)
            write_atomic(self.conf, self._config().encode(), 0o600)
            env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
            err = self.dir / "start.err"
            with open(err, "wb") as errf:
                proc = subprocess.run(
                    [sys.executable, "-m", "supervisor.supervisord", "-c", str(self.conf)],
                    stdin=subprocess.DEVNULL,
                    stdout=errf,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.dir,
                    start_new_session=True,
                    timeout=START_TIMEOUT,
                    check=False,
                )
            if proc.returncode != 0:
                raise BackendError(
                    f"supervisord did not start (exit {proc.returncode}): "
                    + _tail_text(err)
                    + f" (its log: {self.logfile})"
                )
            deadline = time.monotonic() + START_TIMEOUT
            while not self.running():
                if time.monotonic() > deadline:
                    raise BackendError(
                        f"supervisord did not answer on {self.sock} within {START_TIMEOUT:g}s "
                        f"(its log: {self.logfile})"
                    )
                time.sleep(0.02)
            return True

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop every program and the daemon; wait until its pid is gone."""
        pid = self.pid()
        if self.running():
            with contextlib.suppress(BackendError, xmlrpc.client.Fault):
                self._call("shutdown")
        if pid is None:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise BackendError(f"supervisord (pid {pid}) did not stop within {timeout:g}s")

    # -- programs ------------------------------------------------------------------

    def conf_file(self, name: str) -> Path:
        return self.programs / f"{name}.conf"

    def add(self, name: str, conf: str) -> None:
        """Write the program's include file and start it (replacing a changed one)."""
        write_atomic(self.conf_file(name), conf.encode(), 0o600)
        try:
            self._call("reloadConfig")
            self._call("addProcessGroup", name, landed=lambda: name in self._groups())
        except xmlrpc.client.Fault as exc:
            if exc.faultCode != ALREADY_ADDED:
                raise BackendError(f"supervisord refused to add {name}: {exc.faultString}") from exc
            self.remove(name, keep_conf=True)
            try:
                self._call("addProcessGroup", name)
            except xmlrpc.client.Fault as again:
                raise BackendError(
                    f"supervisord refused to add {name}: {again.faultString}"
                ) from again

    def start(self, name: str) -> None:
        try:
            self._call("startProcessGroup", name, False)
        except xmlrpc.client.Fault as exc:
            if exc.faultCode != ALREADY_STARTED:
                raise BackendError(f"supervisord cannot start {name}: {exc.faultString}") from exc

    def stop(self, name: str, stopwaitsecs: float = STOPWAITSECS) -> None:
        """Stop the program (TERM, then KILL after ``stopwaitsecs``: supervisord's doing).

        Asked without waiting, then watched: supervisord notices a child's exit at a turn
        of its loop, which turns once a second when nothing wakes it, and a stop it waits
        for answers only then (measured: each old program of a redeploy took up to a second
        to stop after its process had gone). Every look here is a call, which turns the
        loop, so a stop ends within a look (50 ms) of its process's exit. Past
        ``stopwaitsecs`` and a margin it waits as supervisord does."""
        if not self._stop_call(name, wait=False):
            return
        deadline = time.monotonic() + stopwaitsecs + STOP_MARGIN
        while time.monotonic() < deadline:
            if state_of(self.info().get(name)) in STOPPED_STATES:
                return
            time.sleep(STOP_LOOK)
        self._stop_call(name, wait=True)

    def _stop_call(self, name: str, wait: bool) -> bool:
        """``stopProcessGroup``; False when there is nothing to stop."""
        try:
            self._call("stopProcessGroup", name, wait)
        except xmlrpc.client.Fault as exc:
            if exc.faultCode not in (BAD_NAME, NOT_RUNNING):
                raise BackendError(f"supervisord cannot stop {name}: {exc.faultString}") from exc
            return False
        return True

    def remove(self, name: str, keep_conf: bool = False) -> None:
        """Stop the program (TERM, then KILL after stopwaitsecs) and forget it."""
        if self.running():
            self.stop(name)
            try:
                self._call("removeProcessGroup", name)
            except xmlrpc.client.Fault as exc:
                if exc.faultCode != BAD_NAME:
                    raise BackendError(
                        f"supervisord cannot remove {name}: {exc.faultString}"
                    ) from exc
        if not keep_conf:
            with contextlib.suppress(FileNotFoundError):
                self.conf_file(name).unlink()

    def _groups(self) -> set[str]:
        """The groups the daemon knows now (a read, retried)."""
        return {str(i["group"]) for i in self._call("getAllProcessInfo")}

    def info(self) -> dict[str, dict[str, Any]]:
        """Every program's state, by name ({} when the daemon is not running).

        One call, not ``running()`` first: a health gate asks every 50 ms, and supervisord
        (one Python process) answers each call in turn, the app's start competing with it."""
        if not self.sock.exists():
            return {}
        try:
            # a cut or reset is asked again (the shared policy): a daemon that answered
            # badly once must never read as "nothing runs" (a stop would then shut it down
            # under every other slot's processes)
            infos = self.policy.call(
                lambda: self._proxy().getAllProcessInfo(),
                transient_rpc,
                what="supervisord getAllProcessInfo",
            )
        except xmlrpc.client.Fault as exc:
            if exc.faultCode == _SHUTDOWN_STATE:
                return {}
            raise BackendError(f"supervisord: {exc.faultString}") from exc
        except (ConnectionRefusedError, FileNotFoundError):
            return {}  # no daemon listens on the socket: none runs (as ``running`` says)
        except (OSError, http.client.HTTPException, xmlrpc.client.ProtocolError) as exc:
            raise BackendError(f"supervisord did not answer getAllProcessInfo: {exc}") from exc
        return {str(i["name"]): cast(dict[str, Any], i) for i in infos}

    def names(self) -> list[str]:
        return sorted(self.info())

    def last_exit(self, name: str) -> int | None:
        """The exit code of the program's last exit, from supervisord's log (its RPC reports
        none for a process that died while starting)."""
        try:
            with open(self.logfile, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 256 * 1024))
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        found = re.findall(rf"exited: {re.escape(name)} \(exit status (\d+)", text)
        if found:
            return int(found[-1])
        killed = re.findall(rf"exited: {re.escape(name)} \(terminated by SIG(\w+)", text)
        if killed:
            with contextlib.suppress(AttributeError):
                return 128 + int(getattr(signal, f"SIG{killed[-1]}"))
        return None


def _tail_text(path: Path, limit: int = 600) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return "(no output)"
    return text[-limit:] or "(no output)"


def state_of(info: Mapping[str, Any] | None) -> str:
    return str(info.get("statename", "STOPPED")) if info else "ABSENT"
