"""Secret values and the references that name them.

A spec never holds a secret value, only a reference (an environment variable or a file).
Values are resolved at deploy time into :class:`Secret`, whose ``str``/``repr``/JSON form
never reveals the value. Rendered artifacts and release records carry placeholders
(``${secrets.NAME}``); a backend substitutes the values only at the moment it writes to
the engine, so no record, plan, diff or log ever holds one.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipway.errors import SecretUnavailable

PLACEHOLDER = re.compile(r"\$\{secrets\.([A-Za-z_][A-Za-z0-9_]*)\}")
MASK = "***"


def placeholder(name: str) -> str:
    """The placeholder text a renderer writes where the value of secret ``name`` goes."""
    return "${secrets." + name + "}"


class Secret:
    """A secret value. Only :meth:`reveal` gives the value; every other form is masked."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def digest(self) -> str:
        """A salted digest, for change detection (config hashes), never for display."""
        return hashlib.sha256(b"shipway-secret\0" + self._value.encode()).hexdigest()

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return f"Secret({MASK})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> Any:
        raise TypeError("a Secret cannot be pickled")


@dataclass(frozen=True)
class SecretRef:
    """Where a secret's value comes from: exactly one of an env var or a file path."""

    name: str
    from_env: str | None = None
    from_file: str | None = None

    def describe(self) -> str:
        if self.from_env:
            return f"environment variable {self.from_env}"
        return f"file {self.from_file}"

    def resolve(self, environ: Mapping[str, str] | None = None) -> Secret:
        env = os.environ if environ is None else environ
        if self.from_env:
            if self.from_env not in env:
                raise SecretUnavailable(
                    f"secrets.{self.name}: environment variable {self.from_env} is not set "
                    f"(hint: export {self.from_env}=... before running shipway)"
                )
            return Secret(env[self.from_env])
        assert self.from_file is not None
        path = Path(self.from_file)
        try:
            return Secret(path.read_text().rstrip("\n"))
        except OSError as exc:
            raise SecretUnavailable(
                f"secrets.{self.name}: cannot read file {path}: {exc.strerror or exc} "
                f"(hint: create it, readable by this user, or change secrets.{self.name}.from_file)"
            ) from exc

    def to_json(self) -> dict[str, str]:
        if self.from_env:
            return {"from_env": self.from_env}
        return {"from_file": str(self.from_file)}


def resolve_all(
    refs: Mapping[str, SecretRef], environ: Mapping[str, str] | None = None
) -> dict[str, Secret]:
    """Resolve every reference, reporting every unavailable one at once."""
    values: dict[str, Secret] = {}
    problems: list[str] = []
    for name, ref in refs.items():
        try:
            values[name] = ref.resolve(environ)
        except SecretUnavailable as exc:
            problems.append(str(exc))
    if problems:
        raise SecretUnavailable("\n".join(problems))
    return values


def names_in(text: str) -> list[str]:
    """The secret names a text refers to through placeholders."""
    return PLACEHOLDER.findall(text)


def reveal(obj: Any, secrets: Mapping[str, Secret]) -> Any:
    """Substitute secret values for placeholders in a JSON-like structure (I/O time only)."""
    if isinstance(obj, str):
        return PLACEHOLDER.sub(lambda m: _value_of(m.group(1), secrets), obj)
    if isinstance(obj, Mapping):
        return {k: reveal(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [reveal(v, secrets) for v in obj]
    return obj


def _value_of(name: str, secrets: Mapping[str, Secret]) -> str:
    if name not in secrets:
        raise SecretUnavailable(f"secrets.{name} is referenced but was not resolved")
    return secrets[name].reveal()


def redact(text: str, secrets: Mapping[str, Secret]) -> str:
    """Mask any secret value that appears in a text (engine messages, logs) before output."""
    for secret in secrets.values():
        value = secret.reveal()
        if len(value) >= 4:
            text = text.replace(value, MASK)
    return text
