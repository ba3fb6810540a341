"""``$NAME`` and ``${NAME}`` in a process's command, expanded the way a Procfile runner
(foreman, honcho, Heroku) does — the same on every backend: ``--bind 0.0.0.0:$PORT`` runs
with the process's port in its words, not the four characters ``$PORT``.

A name is taken from the process's environment as shipway sets it (the spec's env, the
slot's, ``PORT``); a name it does not set (the image's own ``ENV``) is left as written, as
is every secret's: a secret value never lands in a command line (readable by every user in
``ps``), the process has it in its environment, and a command that needs it runs under a
shell (``sh -c '... $API_TOKEN'``), which expands it there itself.

The local backend's launcher (backends/local/launch.py) applies the very same rule at each
start; it is standalone (no shipway import), so it keeps its own copy, and a test holds the
two to one behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand(word: str, env: Mapping[str, str], keep: Collection[str] = ()) -> str:
    """``$NAME`` / ``${NAME}`` replaced from ``env``; unknown names, and the names in
    ``keep`` (secrets), are left as written."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return m.group(0) if name in keep else env.get(name, m.group(0))

    return _VAR.sub(sub, word)


def expand_words(
    words: Sequence[str], env: Mapping[str, str], keep: Collection[str] = ()
) -> tuple[str, ...]:
    """Every word of a command expanded (:func:`expand`)."""
    return tuple(expand(w, env, keep) for w in words)
