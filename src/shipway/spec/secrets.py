"""Secret values and the references that name them.

A spec never holds a secret value, only a reference (an environment variable or a file).
Values are resolved at deploy time into :class:`Secret`, whose ``str``/``repr``/JSON form
never reveals the value. Rendered artifacts and release records carry placeholders
(``${secrets.NAME}``); a backend substitutes the values only at the moment it writes to
the engine, so no record, plan, diff or log ever holds one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipway.errors import SecretUnavailable
from shipway.spec.limits import MAX_SECRET_FILE_BYTES, Unreadable, read_regular_file, size_text

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

    def mark(self, salt: str) -> str:
        """A keyed digest (HMAC-SHA256 under ``salt``) that tells whether two releases of a
        slot ran the same value. Kept in release records only, never shown."""
        return hmac.new(salt.encode(), self._value.encode(), hashlib.sha256).hexdigest()

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
    """Where a secret's value comes from: exactly one of an env var, a file path, or an
    accessory's link (``from_accessory``: its value is kept in the target, and the engine
    asks the backend for it — :meth:`resolve` cannot)."""

    name: str
    from_env: str | None = None
    from_file: str | None = None
    from_accessory: str | None = None
    #: the value an env file (``[app] env_file``) gives ``from_env``, used when the
    #: environment does not set it; never in a record (``to_json`` names the variable only)
    env_file_value: Secret | None = field(default=None, repr=False, compare=False)
    #: the env files the spec declares, named in the hint when the variable is set nowhere
    env_files: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> str:
        if self.from_env:
            return f"environment variable {self.from_env}"
        if self.from_accessory:
            return f"the link of accessory {self.from_accessory}"
        return f"file {self.from_file}"

    def resolve(self, environ: Mapping[str, str] | None = None) -> Secret:
        env = os.environ if environ is None else environ
        if self.from_accessory:
            raise SecretUnavailable(
                f"secrets.{self.name}: the link of accessory {self.from_accessory} is kept in "
                "the slot, and only a deploy, status or run of that slot reads it"
            )
        if self.from_env:
            if self.from_env in env:
                return Secret(env[self.from_env])
            if self.env_file_value is not None:
                return self.env_file_value
            where = "".join(f" or add it to {name}" for name in self.env_files)
            raise SecretUnavailable(
                f"secrets.{self.name}: environment variable {self.from_env} is not set"
                + (f" (nor in {', '.join(self.env_files)})" if self.env_files else "")
                + f" (hint: export {self.from_env}=... before running shipway{where})"
            )
        assert self.from_file is not None
        path = Path(self.from_file)
        hint = (
            f"a regular file of at most {size_text(MAX_SECRET_FILE_BYTES)} readable by this "
            f"user, or change secrets.{self.name}.from_file"
        )
        try:
            raw = read_regular_file(path, MAX_SECRET_FILE_BYTES)
        except Unreadable as exc:
            raise SecretUnavailable(
                f"secrets.{self.name}: file {path} {exc} (hint: {hint})"
            ) from exc
        try:
            return Secret(raw.decode("utf-8").rstrip("\n"))
        except UnicodeDecodeError:
            # Never the decoder's message: it quotes a byte of the secret.
            raise SecretUnavailable(
                f"secrets.{self.name}: file {path} is not UTF-8 text (hint: {hint})"
            ) from None

    def to_json(self) -> dict[str, str]:
        if self.from_env:
            return {"from_env": self.from_env}
        if self.from_accessory:
            return {"from_accessory": self.from_accessory}
        return {"from_file": str(self.from_file)}


def resolve_all(
    refs: Mapping[str, SecretRef], environ: Mapping[str, str] | None = None
) -> dict[str, Secret]:
    """Resolve every reference, reporting every unavailable one at once. An accessory's
    link is not among them: the target keeps it (the engine asks the backend)."""
    values: dict[str, Secret] = {}
    problems: list[str] = []
    for name, ref in refs.items():
        if ref.from_accessory:
            continue
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


#: values this long or longer are masked wherever they appear, inside words too
MASK_ANYWHERE = 4
_WORD = r"[A-Za-z0-9_]"


@dataclass(frozen=True)
class HashedValue:
    """A secret value kept only as its length and a salted digest: enough to find it in a
    text again (:class:`Masker`), never to tell it."""

    length: int
    digest: str

    @classmethod
    def of(cls, value: str, salt: str) -> HashedValue:
        return cls(len(value), _salted(value, salt))

    def to_json(self) -> dict[str, Any]:
        return {"length": self.length, "digest": self.digest}


def _salted(value: str, salt: str) -> str:
    return hashlib.sha256(f"shipway-mask\0{salt}\0{value}".encode()).hexdigest()


class Masker:
    """The one place shipway hides secret values in the text it shows or keeps: engine
    messages, failure details, logs, release-command output, recorded error texts.

    The rule (documented in docs/security.md):

    * a value of ``MASK_ANYWHERE`` (4) characters or more is masked wherever it appears;
    * a shorter value (1 to 3 characters) is masked wherever it stands as a whole token —
      not inside a longer word or number: ``pw=abc`` and ``"abc"`` become ``pw=***`` and
      ``"***"``, while ``abcdef`` stays as it is (masking every ``ab`` in every word would
      garble all output and tell a reader the value anyway, by elimination);
    * an empty value masks nothing.

    Longer values are matched first, so a secret that contains another is masked whole.
    Values known only by their salted digest (``hashed``, with their ``salt``: a value given
    to a process that is gone, whose log is kept) are masked by the same rule.
    """

    __slots__ = ("_hashed", "_pattern", "_salt")

    def __init__(
        self,
        values: Iterable[str | Secret] = (),
        hashed: Iterable[HashedValue] = (),
        salt: str = "",
    ) -> None:
        plain = {v.reveal() if isinstance(v, Secret) else v for v in values}
        parts = []
        for value in sorted((v for v in plain if v), key=len, reverse=True):
            escaped = re.escape(value)
            if len(value) >= MASK_ANYWHERE:
                parts.append(escaped)
            else:
                parts.append(f"(?<!{_WORD}){escaped}(?!{_WORD})")
        self._pattern = re.compile("|".join(parts)) if parts else None
        known = {_salted(v, salt) for v in plain}
        by_length: dict[int, set[str]] = {}
        for h in hashed:
            if h.length > 0 and h.digest not in known:
                by_length.setdefault(h.length, set()).add(h.digest)
        self._hashed = sorted(by_length.items(), reverse=True)
        self._salt = salt

    @classmethod
    def of(cls, secrets: Mapping[str, Secret]) -> Masker:
        return cls(secrets.values())

    def __call__(self, text: str) -> str:
        if not text:
            return text
        if self._pattern is not None:
            text = self._pattern.sub(MASK, text)
        return self._mask_hashed(text) if self._hashed else text

    def _mask_hashed(self, text: str) -> str:
        """Every window of a hashed value's length whose digest is that value's (a short
        one only where it stands as a token), longest first."""
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            for length, digests in self._hashed:
                window = text[i : i + length]
                if len(window) < length:
                    continue
                if length < MASK_ANYWHERE and not _token_at(text, i, length):
                    continue
                if _salted(window, self._salt) in digests:
                    out.append(MASK)
                    i += length
                    break
            else:
                out.append(text[i])
                i += 1
        return "".join(out)

    def __bool__(self) -> bool:
        return self._pattern is not None or bool(self._hashed)


def _token_at(text: str, start: int, length: int) -> bool:
    """Whether ``text[start:start + length]`` stands as a token (no word character just
    before or after it)."""
    before = text[start - 1] if start > 0 else ""
    after = text[start + length] if start + length < len(text) else ""
    return not (re.match(_WORD, before) or re.match(_WORD, after))


def redact(text: str, secrets: Mapping[str, Secret]) -> str:
    """Mask every secret value in a text before output (:class:`Masker`'s rule)."""
    return Masker.of(secrets)(text)
