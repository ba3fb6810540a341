"""A process that has imported shipway once and forks a fresh ``python -m shipway`` from
itself for each request (see :mod:`tests.cliproc`). Run as a script:
``python tests/cliproc_zygote.py SOCKET PARENT_PID``.

It is single-threaded and does nothing but import, so each child starts from the state a
new interpreter has after the same imports. A request is one connection: a JSON line
(argv, env, cwd, session and process-group wishes) with the child's standard streams as
three descriptors (SCM_RIGHTS); the reply is the child's pid, then — when it ends — its
wait status, each a JSON line.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from typing import Any

#: what a child would import itself otherwise, each time: the CLI and API, the backends,
#: and what the API and the CLI import lazily (the engine, 34 ms of CPU a command, and the
#: output's modules), as most commands of the suite import them (counted over tests/cli);
#: and what a command imports once it reaches a host or a cluster, counted over the
#: children of a sample of the Docker, Kubernetes and local tests: for host B over SSH,
#: paramiko (90 to 170 ms of CPU a command), for a cluster, the HTTP stack of lightkube's
#: client (httpcore2, with the trio and anyio the test extras bring: 160 to 210 ms with the
#: Kubernetes source modules), each more than the rest of such a command
PRELOAD = (
    "shipway.cli.main",
    "shipway.api",
    "shipway.backends.local.backend",
    "shipway.backends.docker.backend",
    "shipway.backends.docker.sshpool",
    "shipway.backends.docker.trust",
    "shipway.backends.kubernetes.backend",
    "shipway.backends.kubernetes.source_slot",
    "httpcore2",
    "shipway.engine.core",
    "shipway.events.notify",
    "shipway.cli.pipe",
    "shipway.cli.report",
    "shipway.cli.term",
    "shipway.cli.hints",
    "_strptime",
)


def _stream(fd: int, env: dict[str, str], *, errors: str) -> io.TextIOWrapper:
    """Standard stream ``fd`` as a new interpreter would open it for this environment."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
    tty = raw.isatty()
    encoding, _, err = env.get("PYTHONIOENCODING", "utf-8").partition(":")
    buffer: Any = io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffer,
        encoding=encoding or "utf-8",
        errors=err or errors,
        line_buffering=tty or (unbuffered and fd != 0),
        write_through=unbuffered or fd == 2,
    )


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become ``python -m shipway ARGS`` and exit as it would."""
    for target, fd in enumerate(fds):  # signals as the zygote's: fresh (_fresh_signals)
        os.dup2(fd, target, inheritable=True)
    os.closerange(3, 65536)  # the zygote's socket and every request's descriptors
    if request.get("new_session"):
        os.setsid()
    elif request.get("process_group") is not None:
        os.setpgid(0, request["process_group"])
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]
    import shipway

    # what ``python -m shipway`` puts in sys.argv[0] (importing __main__ would run it)
    sys.argv = [os.path.join(os.path.dirname(shipway.__file__), "__main__.py"), *request["argv"]]
    sys.stdin = sys.__stdin__ = _stream(0, env, errors="strict")  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = _stream(1, env, errors="strict")  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = _stream(2, env, errors="backslashreplace")  # type: ignore[misc]
    if env.get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable(sys.stderr)
    code = 0
    try:
        from shipway.cli.main import main

        main()
    except SystemExit as exit_:
        if exit_.code is None:
            code = 0
        elif isinstance(exit_.code, int):
            code = exit_.code & 0xFF
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish()
        # as the interpreter does: an unhandled ^C ends the process by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    _finish()
    os._exit(code)


def _finish() -> None:
    """What the interpreter does on its way out: wait for the non-daemon threads, run the
    exit functions, flush the streams."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


def _fresh_signals() -> None:
    """Signals as a new interpreter started from a shell has them: none blocked, SIGINT
    raising KeyboardInterrupt, SIGTERM ending the process. A pytest worker has been seen
    to start a process with SIGINT ignored or blocked (a command then never ends on ^C);
    whatever the worker's state, each command starts as ``python -m shipway`` would from
    a terminal."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def serve(path: str, parent: int) -> None:
    _fresh_signals()
    for name in PRELOAD:
        __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    print("ready", flush=True)
    while True:
        if os.getppid() != parent:
            return  # the test process is gone: so is its zygote
        for key, _ in selector.select(timeout=1.0):
            if key.data is None:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    _child(request, fds)
                for fd in fds:
                    os.close(fd)
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                pidfd = os.pidfd_open(pid)
                waiting[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ, "child")
            else:
                pidfd = key.fd
                pid, conn = waiting.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the test may have stopped waiting
                    conn.sendall(json.dumps({"status": status}).encode() + b"\n")
                conn.close()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
