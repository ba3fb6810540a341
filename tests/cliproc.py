"""``python -m shipway ARGS`` run by the tests as its own process, without paying the
imports each time.

A whole run starts the CLI some two thousand times, and each start spent ~0.3 s of CPU on
imports alone (docs/testing.md, "Where the CPU goes"). Here each pytest worker keeps one
process that has imported shipway (``tests/cliproc_zygote.py``) and forks a child from it
for each command. The child is still a process of its own — its own pid, standard streams,
environment, working directory, session, signals and exit code — so a test interrupts it,
kills it with SIGKILL or reads its output exactly as it would a ``python -m shipway``
started by exec. Only the start-up differs: the modules are already imported.

:class:`ShipwayProcess` is a :class:`subprocess.Popen` for an argv that starts with
:data:`SHIPWAY`; any other argv, or options a fork cannot honour (``preexec_fn``,
``pass_fds``, ``shell``, user and group changes), runs by exec as usual. Setting
``SHIPWAY_TEST_EXEC_CLI=1`` runs every command by exec (to compare, or to rule this out).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: the argv prefix of a shipway command
SHIPWAY = (sys.executable, "-m", "shipway")
ZYGOTE_SCRIPT = Path(__file__).with_name("cliproc_zygote.py")

_zygote: dict[int, tuple[subprocess.Popen[bytes], str]] = {}  # test pid -> (zygote, socket)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


def _zygote_socket() -> str:
    """This process's zygote's socket, started (once, or again if it died) on first use."""
    here = os.getpid()
    known = _zygote.get(here)
    if known is not None and known[0].poll() is None:
        return known[1]
    path = os.path.join(tempfile.mkdtemp(prefix="shipway-cli-"), "zygote.sock")
    proc = subprocess.Popen(
        [sys.executable, str(ZYGOTE_SCRIPT), path, str(here)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    if ready.strip() != b"ready":
        proc.wait()
        raise RuntimeError(f"the shipway zygote did not start (exit {proc.returncode})")
    atexit.register(_stop, proc)
    _zygote[here] = (proc, path)
    return path


def _forkable(argv: list[Any], kw: dict[str, Any]) -> bool:
    return (
        [os.fspath(a) for a in argv[: len(SHIPWAY)]] == list(SHIPWAY)
        and not os.environ.get("SHIPWAY_TEST_EXEC_CLI")
        and kw["preexec_fn"] is None
        and not kw["pass_fds"]
        and not kw["shell"]
        and kw["executable"] is None
        and kw["uid"] is None
        and kw["gid"] is None
        and kw["gids"] is None
        and kw["umask"] < 0
    )


class ShipwayProcess(subprocess.Popen[Any]):
    """A :class:`subprocess.Popen` whose shipway commands are forked from the zygote."""

    _conn: socket.socket | None = None
    _pending = b""

    def _execute_child(
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: bool,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: int,
        shell: bool,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        restore_signals: bool,
        gid: Any,
        gids: Any,
        uid: Any,
        umask: int,
        start_new_session: bool,
        process_group: int,
    ) -> None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        options = {
            "preexec_fn": preexec_fn, "pass_fds": pass_fds, "shell": shell,
            "executable": executable, "uid": uid, "gid": gid, "gids": gids, "umask": umask,
        }  # fmt: skip
        if not _forkable(argv, options):
            super()._execute_child(  # type: ignore[misc]
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread,
                errwrite, restore_signals, gid, gids, uid, umask, start_new_session,
                process_group,
            )  # fmt: skip
            return
        request = {
            "argv": [os.fsdecode(a) for a in argv[len(SHIPWAY) :]],
            "env": {os.fsdecode(k): os.fsdecode(v) for k, v in (env or os.environ).items()},
            "cwd": os.fsdecode(cwd) if cwd is not None else os.getcwd(),
            "new_session": bool(start_new_session),
            "process_group": process_group if process_group >= 0 else None,
        }
        streams = [p2cread, c2pwrite, errwrite]
        fds = [fd if fd != -1 else std for std, fd in enumerate(streams)]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(_zygote_socket())
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
            reply = self._message(conn, block=True)
            assert reply is not None
            self.pid = int(reply["pid"])
        except BaseException:
            conn.close()
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]
            raise
        self._conn = conn
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]

    def _message(self, conn: socket.socket, *, block: bool) -> dict[str, Any] | None:
        """The zygote's next JSON line about this child; None if none yet (not blocking)."""
        conn.setblocking(block)
        while b"\n" not in self._pending:
            try:
                chunk = conn.recv(4096)
            except BlockingIOError:
                return None
            if not chunk:
                # the zygote is gone: the child's status went with it
                return {"status": 255 << 8, "pid": self.pid}
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        if self._conn is None:
            return super()._try_wait(wait_flags)  # type: ignore[misc,no-any-return]
        message = self._message(self._conn, block=not wait_flags & os.WNOHANG)
        if message is None:
            return (0, 0)
        self._conn.close()
        return (self.pid, int(message["status"]))

    def _internal_poll(self, _deadstate: int | None = None, **_: Any) -> int | None:
        if self._conn is None:
            return super()._internal_poll(_deadstate)  # type: ignore[misc,no-any-return]
        if self.returncode is None and self._waitpid_lock.acquire(False):  # type: ignore[attr-defined]
            try:
                if self.returncode is None:
                    pid, status = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        self._handle_exitstatus(status)  # type: ignore[attr-defined]
            finally:
                self._waitpid_lock.release()  # type: ignore[attr-defined]
        return self.returncode


def run(
    args: list[Any],
    *,
    input: Any = None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """:func:`subprocess.run`, its shipway commands forked from the zygote."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with ShipwayProcess(args, **kwargs) as process:
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            process.kill()
            expired.output, expired.stderr = process.communicate()
            raise
        except BaseException:
            process.kill()
            raise
        code = process.poll()
    assert code is not None
    if check and code:
        raise subprocess.CalledProcessError(code, process.args, output=out, stderr=err)
    return subprocess.CompletedProcess(process.args, code, out, err)
