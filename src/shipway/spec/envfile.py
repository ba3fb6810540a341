"""Env files (``[app] env_file = ".env"``, or a list): plain environment from the files an
app already keeps for foreman, honcho, docker compose or python-dotenv.

Precedence, lowest first: the spec's ``[env]`` < the env files (a later file over an
earlier one) < the slot's ``env`` overrides. A variable that a secret reads (``from_env``),
or that has a secret's name, is NOT plain env: it stays out of ``App.env`` (so out of
plans, diffs, records and JSON) and reaches the processes only as that secret, masked like
any secret. Nor is one that looks like a credential (:func:`is_credential`: its name or its
value): it becomes a secret of its own name, read from itself. The shell's own environment
wins over an env file for a secret's ``from_env``.

Format (python-dotenv's common subset): ``KEY=value`` lines, an optional ``export``
prefix, ``#`` comments, blank lines; a value may be single-quoted (literal), double-quoted
(``\\n``, ``\\t``, ``\\"`` and ``\\\\`` escapes) or bare (a `` #`` starts a comment). There is
no ``${VAR}`` interpolation: what is written is the value.

An env file may hold secrets, so a problem is reported by file, line and key only, never
with the line's text; and an env file never enters a snapshot or an image (the backends
leave every declared env file and every ``.env`` out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from shipway.errors import SpecProblem
from shipway.spec.limits import MAX_SPEC_BYTES, Unreadable, read_regular_file, size_text

#: the names an env file may have: ``.env``, ``.env.NAME``, ``NAME.env``. Snapshots and
#: build contexts leave every file so named out, wherever it is, so none of them can
#: carry a secret into a release (DESIGN.md, invariant 12)
ENV_FILE_NAME = re.compile(r"^(\.env(\..+)?|.+\.env)$")
_ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}


@dataclass
class EnvFile:
    """The variables of one env file, in file order, and the problems found reading it."""

    file: str
    values: dict[str, str] = field(default_factory=dict)
    problems: list[SpecProblem] = field(default_factory=list)

    def error(self, line: int | None, message: str, hint: str = "") -> None:
        self.problems.append(SpecProblem(self.file, "app.env_file", message, hint, line))


def read(name: str, base_dir: Path) -> EnvFile:
    """Read the env file ``name`` (relative to the spec's directory)."""
    found = EnvFile(file=name)
    path = base_dir / name
    try:
        text = read_regular_file(path, MAX_SPEC_BYTES).decode("utf-8")
    except Unreadable as exc:
        found.error(
            None,
            f"{path} {exc}",
            f"a regular file of at most {size_text(MAX_SPEC_BYTES)}, or remove it from "
            "app.env_file",
        )
        return found
    except UnicodeDecodeError:
        # never the decoder's message: it quotes a byte of the file, which may be a secret
        found.error(None, f"{path} is not UTF-8 text", "save it as UTF-8")
        return found
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        number = _assignment(found, lines, number)
    return found


def _assignment(found: EnvFile, lines: list[str], index: int) -> int:
    """Read the assignment starting at ``lines[index]``; the index of the next line."""
    number = index + 1
    stripped = lines[index].strip()
    if not stripped or stripped.startswith("#"):
        return number
    m = _ASSIGNMENT.match(stripped)
    if m is None:
        found.error(number, "is not a KEY=value line (its text is not shown)", "KEY=value")
        return number
    key, rest = m.group(1), m.group(2)
    if rest[:1] in ("'", '"'):
        quote = rest[0]
        body = rest[1:]
        # a quoted value may run over several lines, as python-dotenv allows
        while _closing(body, quote) < 0 and number < len(lines):
            body += "\n" + lines[number]
            number += 1
        end = _closing(body, quote)
        if end < 0:
            found.error(index + 1, f"{key}: its quoted value is never closed", f"end it: {quote}")
            return number
        value = body[:end]
        found.values[key] = _unescape(value) if quote == '"' else value
        return number
    found.values[key] = re.split(r"\s+#", rest, maxsplit=1)[0].strip()
    return number


def _closing(body: str, quote: str) -> int:
    """Where the closing ``quote`` is in ``body`` (-1: none); ``\\"`` does not close."""
    i = 0
    while i < len(body):
        if body[i] == "\\" and quote == '"':
            i += 2
            continue
        if body[i] == quote:
            return i
        i += 1
    return -1


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), value, flags=re.S)


#: a name holding one of these anywhere names a credential (``DJANGO_SECRET_KEY``)
_CREDENTIAL_PART = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|APIKEY")
#: a name holding one of these as a word (between ``_``) names a credential
_CREDENTIAL_WORDS = frozenset(
    {"PASS", "PWD", "KEY", "PAT", "SK", "DSN", "AUTH", "SIGNING", "WEBHOOK", "SALT", "COOKIE"}
)
#: a name ending with one of these words: a URL, which may carry a user and password
_CREDENTIAL_LAST_WORDS = frozenset({"URL", "URI", "URIS", "URLS"})
#: values that are credentials whatever their name
_CREDENTIAL_VALUE = re.compile(
    r"^[A-Za-z][A-Za-z0-9+.-]*://[^/\s@:]*:[^/\s@]+@"  # scheme://user:password@host
    r"|^(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{8,}"  # Stripe secret and restricted keys
    r"|^(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"  # GitHub tokens
    r"|^(?:AKIA|ASIA)[A-Z0-9]{16}$"  # AWS access key ids
    r"|^xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|^https://hooks\.slack\.com/"  # Slack webhooks
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|^eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."  # a JWT
)


def is_credential(name: str, value: str = "") -> bool:
    """Whether the variable ``name`` (with ``value``, when known) holds a credential: by its
    name (``SECRET``, ``TOKEN``, ``PASSWORD`` … anywhere; ``KEY``, ``PWD``, ``PAT``, ``SK``,
    ``AUTH``, ``DSN``, ``WEBHOOK`` … as a word; ``…_URL``, ``…_URI`` at the end) or by its
    value (``scheme://user:pass@host``, ``sk_live_…``, ``ghp_…``, ``AKIA…``, a private key).

    The one rule: ``shipway init`` makes such a variable a secret, and an env file's such
    variable is never plain env (it becomes a secret read from that variable)."""
    upper = name.upper()
    if _CREDENTIAL_PART.search(upper.replace("_", "")):
        return True
    words = [w for w in upper.split("_") if w]
    if _CREDENTIAL_WORDS.intersection(words):
        return True
    if words and words[-1] in _CREDENTIAL_LAST_WORDS:
        return True
    return bool(value) and bool(_CREDENTIAL_VALUE.search(value.strip()))


def is_env_file(name: str) -> bool:
    """Whether a file of this name (its last path part) is an env file, never copied into
    a snapshot or an image."""
    return bool(ENV_FILE_NAME.match(name))


def names(raw: object) -> list[str] | None:
    """``env_file`` as a list of names (a string is one); None when it is neither."""
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and all(isinstance(n, str) for n in raw):
        return list(raw)
    return None
