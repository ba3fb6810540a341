"""The ``[secrets]`` table: references to values (an environment variable, a file, an
accessory's link), never the values themselves (:mod:`.secrets` resolves them)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shipway.spec.check import Checker
from shipway.spec.locate import KeyPath
from shipway.spec.secrets import SecretRef

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ANY = re.compile(r".")
SOURCES = ("from_env", "from_file", "from_accessory")


def parse_secrets(c: Checker, raw: Any, base_dir: Path) -> dict[str, SecretRef]:
    """The ``[secrets]`` table: each one a reference (from_env, from_file, from_accessory),
    never a value."""
    table = c.table(raw, ("secrets",)) or {}
    out: dict[str, SecretRef] = {}
    for name, value in table.items():
        path: KeyPath = ("secrets", name)
        if not ENV_NAME.match(name):
            c.error(
                path,
                f"{name!r} is not a valid secret name",
                "secrets become environment variables: letters, digits and '_'",
            )
            continue
        if not isinstance(value, Mapping):
            # Never echo the value: it may be the secret itself.
            c.error(
                path,
                "a literal secret value is not allowed in the spec",
                f'reference it instead: {name} = {{ from_env = "{name}" }} '
                'or { from_file = "path/to/file" }',
            )
            continue
        ref = c.table(value, path, SOURCES) or {}
        if len(ref) != 1 or not (set(SOURCES) & set(ref)):
            c.error(
                path,
                "needs exactly one of from_env, from_file or from_accessory",
                f'e.g. {name} = {{ from_env = "{name}" }}',
            )
            continue
        if "from_env" in ref:
            env = c.string(
                ref["from_env"],
                (*path, "from_env"),
                pattern=ENV_NAME,
                what="environment variable name",
                hint=f'name the variable that holds it, e.g. from_env = "{name}"',
                secret=True,
            )
            if env:
                out[name] = SecretRef(name=name, from_env=env)
        elif "from_accessory" in ref:
            accessory = c.string(
                ref["from_accessory"],
                (*path, "from_accessory"),
                pattern=_ANY,
                what="accessory name",
                hint='name one of [accessories], e.g. from_accessory = "db"',
            )
            if accessory:
                out[name] = SecretRef(name=name, from_accessory=accessory)
        else:
            file = c.string(
                ref["from_file"],
                (*path, "from_file"),
                pattern=_ANY,
                what="path",
                hint="the file that holds the value, relative to the spec",
            )
            if file:
                out[name] = SecretRef(name=name, from_file=_absolute(base_dir / file))
    return out


def _absolute(path: Path) -> str:
    """Resolved when it can be; a symlink loop is not the spec's problem until the secret is
    read (then it is refused with its name), so it must not fail the spec here."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):  # RuntimeError: Python 3.11's "Symlink loop from …"
        return os.path.abspath(path)
