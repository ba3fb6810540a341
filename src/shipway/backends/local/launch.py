"""Starts one program instance for supervisord: ``python launch.py ENVFILE COUNTER -- CMD…``

Standalone on purpose (standard library only, no shipway import): supervisord runs it at
every start and restart, so it must be quick and must not depend on anything but Python.

It reads the instance's environment from ENVFILE (JSON, mode 0600: it may hold secret
values, which therefore never appear in a supervisord config), counts the start in COUNTER
(``status`` shows restarts = starts - 1), expands ``$NAME`` and ``${NAME}`` in the
command's words from that environment (as a Procfile runner does:
``--bind 127.0.0.1:$PORT``), and replaces itself with the command — same pid, so
supervisord signals the app itself.

The names of secrets (ENVFILE's ``secret_names``) are NOT expanded: ``$API_TOKEN`` stays
as written, so a secret value never lands in the process's command line (readable by
every user in ``/proc/<pid>/cmdline`` and ``ps``). The process has it in its environment;
a shell command (``sh -c '... $API_TOKEN'``) expands it there itself.
"""

from __future__ import annotations

import json
import os
import re
import sys
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


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: launch.py ENVFILE COUNTER -- COMMAND...", file=sys.stderr)
        return 2
    envfile, counter, command = argv[0], argv[1], argv[3:]
    with open(envfile) as f:
        doc = json.load(f)
    env = {str(k): str(v) for k, v in doc["env"].items()}
    secret_names = {str(n) for n in doc.get("secret_names", [])}
    count_start(counter)
    words = [expand(w, env, keep=secret_names) for w in command]
    try:
        os.execvpe(words[0], words, env)
    except OSError as exc:
        print(f"shipway: cannot run {words[0]!r}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127
    return 0  # pragma: no cover - exec does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
