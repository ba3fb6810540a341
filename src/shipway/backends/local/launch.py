"""Starts one program instance for supervisord: ``python launch.py ENVFILE COUNTER -- CMD…``

Standalone on purpose (standard library only, no shipway import): supervisord runs it at
every start and restart, so it must be quick and must not depend on anything but Python.

It reads the instance's environment from ENVFILE (JSON, mode 0600: it may hold secret
values, which therefore never appear in a supervisord config), counts the start in COUNTER
(``status`` shows restarts = starts - 1), expands ``$NAME`` and ``${NAME}`` in the
command's words from that environment (as a Procfile runner does:
``--bind 127.0.0.1:$PORT``), and replaces itself with the command — same pid, so
supervisord signals the app itself.

Its output is timestamped: before the exec, a forked child (the stamper) takes the
command's stdout and stderr through a pipe and writes them on to supervisord's log with the
time each line began in front (``2026-12-01T10:00:00.123Z ``, UTC, to the millisecond), so
``shipway logs --timestamps`` and ``--since`` tell when a line was written, not when it was
read. The stamper ignores SIGTERM/SIGINT/SIGHUP (a stop signals the whole group) and ends at
end of file, when the command and everything it started have closed their output: the
last lines of a dying process (a shutdown trace, a crash's error) are never lost. supervisord
reads a process's output once more when it reaps it, then closes its end of the pipe; a
stamper that had not written its last lines by then (a loaded machine) finds the pipe
closed, and appends them to the instance's log itself (ENVFILE's ``log``).

The names of secrets (ENVFILE's ``secret_names``) are NOT expanded: ``$API_TOKEN`` stays
as written, so a secret value never lands in the process's command line (readable by
every user in ``/proc/<pid>/cmdline`` and ``ps``). The process has it in its environment;
a shell command (``sh -c '... $API_TOKEN'``) expands it there itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Collection, Mapping

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand(word: str, env: Mapping[str, str], keep: Collection[str] = ()) -> str:
    """``$NAME`` / ``${NAME}`` replaced from ``env``; unknown names, and the names in
    ``keep`` (secrets), are left as written."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return m.group(0) if name in keep else env.get(name, m.group(0))

    return _VAR.sub(sub, word)


def count_start(path: str) -> None:
    try:
        with open(path) as f:
            starts = int(f.read().strip() or 0)
    except (OSError, ValueError):
        starts = 0
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{starts + 1}\n")
    os.replace(tmp, path)


def stamp(now: float) -> bytes:
    """The prefix of a line begun at ``now`` (logfiles.STAMPED reads it back)."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    return f"{whole}.{int(now % 1 * 1000):03d}Z ".encode()


def stamped(chunk: bytes, at_line_start: bool, now: float) -> tuple[bytes, bool]:
    """``chunk`` with a stamp at the start of each line in it; whether the next chunk
    starts a line."""
    out = bytearray()
    parts = chunk.split(b"\n")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if last and not part:
            return bytes(out), True
        if at_line_start:
            out += stamp(now)
        out += part
        if not last:
            out += b"\n"
        at_line_start = not last
    return bytes(out), at_line_start


def _spill(log: str | None) -> int | None:
    """The instance's log, opened to append to, or None (no log named, or it is gone: a
    removed log is not made again)."""
    if not log:
        return None
    try:
        return os.open(log, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return None


def _stamper(source: int, sink: int, log: str | None = None) -> None:
    """Stamps ``source``'s lines onto ``sink`` until end of file; once ``sink`` is closed
    under it (supervisord reaped the command), onto ``log`` (appended)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    at_line_start = True
    spilled = False
    while True:
        try:
            chunk = os.read(source, 65536)
        except InterruptedError:
            continue
        except OSError:
            return
        if not chunk:
            return
        out, at_line_start = stamped(chunk, at_line_start, time.time())
        while out:
            try:
                out = out[os.write(sink, out) :]
            except InterruptedError:
                continue
            except OSError:
                spill = None if spilled else _spill(log)
                if spill is None:
                    return
                sink, spilled = spill, True


def stamp_output(log: str | None = None) -> None:
    """From here on, this process's stdout and stderr go through the stamper (``log``: the
    file it appends to once supervisord no longer reads them)."""
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.close(write_end)
        try:
            _stamper(read_end, 1, log)
        finally:
            os._exit(0)
    os.close(read_end)
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: launch.py ENVFILE COUNTER -- COMMAND...", file=sys.stderr)
        return 2
    envfile, counter, command = argv[0], argv[1], argv[3:]
    with open(envfile) as f:
        doc = json.load(f)
    env = {str(k): str(v) for k, v in doc["env"].items()}
    secret_names = {str(n) for n in doc.get("secret_names", [])}
    log = doc.get("log")
    words = [expand(w, env, keep=secret_names) for w in command]
    sys.stdout.flush()
    stamp_output(log if isinstance(log, str) else None)
    count_start(counter)  # last before the exec: an uptime gate's clock starts at the program
    try:
        os.execvpe(words[0], words, env)
    except OSError as exc:
        print(f"shipway: cannot run {words[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127
    return 0  # pragma: no cover - exec does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
