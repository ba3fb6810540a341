"""The checks every section of a spec is made of: table, string, integer, boolean,
duration, command, choice.

Each check records a :class:`SpecProblem` (key path, line, message, hint) and returns None
instead of raising, so one pass reports every error in the file. Integers and durations are
bounded (spec/limits.py): a deploy waits through every duration, so none may be endless.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, cast

from shipway.errors import SpecProblem
from shipway.spec.limits import COUNTS, MAX_DURATION
from shipway.spec.locate import KeyPath, Locator, render_path

DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?)(ms|s|m|h)$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

T = TypeVar("T")
_SUGGESTED = 20  # unknown keys per table that get a "did you mean"


class Checker:
    def __init__(self, file: str, locate: Locator) -> None:
        self.file = file
        self.locate = locate
        self.problems: list[SpecProblem] = []

    def error(self, path: KeyPath, message: str, hint: str = "") -> None:
        self.problems.append(
            SpecProblem(self.file, render_path(path), message, hint, self.locate(path))
        )

    def table(
        self, value: Any, path: KeyPath, allowed: Iterable[str] | None = None
    ) -> dict[str, Any] | None:
        if not isinstance(value, Mapping):
            self.error(path, f"must be a table, not {kind_of(value)}")
            return None
        if allowed is not None:
            allowed = tuple(allowed)
            unknown = [key for key in value if key not in allowed]
            for i, key in enumerate(unknown):
                # A typo gets a suggestion; thousands of unknown keys are not typos, and
                # matching each one would cost seconds.
                close = difflib.get_close_matches(str(key), allowed, n=1) if i < _SUGGESTED else []
                hint = f"did you mean {close[0]!r}?" if close else "allowed: " + ", ".join(allowed)
                self.error((*path, str(key)), "unknown key", hint)
        return dict(value)

    def string(
        self,
        value: Any,
        path: KeyPath,
        *,
        pattern: re.Pattern[str] | None = None,
        what: str = "",
        hint: str = "",
        secret: bool = False,
    ) -> str | None:
        """``secret``: the value may be a secret typed in the wrong place; never echo it."""
        if not isinstance(value, str):
            self.error(path, f"must be a string, not {kind_of(value)}", hint)
            return None
        if pattern is not None and not pattern.match(value):
            shown = "the value (not shown: it may be a secret)" if secret else repr(value)
            self.error(path, f"{shown} is not a valid {what}", hint)
            return None
        return value

    def integer(self, value: Any, path: KeyPath, count: str) -> int | None:
        """``count`` names its bounds in limits.COUNTS."""
        lo, hi = COUNTS[count]
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"must be an integer, not {kind_of(value)}")
            return None
        if not lo <= value <= hi:
            self.error(path, f"{_shown(value)} is out of range", f"use a value from {lo} to {hi}")
            return None
        return value

    def boolean(self, value: Any, path: KeyPath) -> bool | None:
        if not isinstance(value, bool):
            self.error(path, f"must be true or false, not {kind_of(value)}")
            return None
        return value

    def duration(self, value: Any, path: KeyPath, kind: str) -> float | None:
        """Seconds; ``kind`` names its upper bound in limits.MAX_DURATION (a deploy waits
        through every duration, so none may be endless: not inf, not 10**18)."""
        limit = MAX_DURATION[kind]
        seconds: float | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            seconds = float(value) if value <= limit else math.inf  # float(10**400) overflows
        elif isinstance(value, float):
            seconds = value
        elif isinstance(value, str) and (m := DURATION.match(value)):
            seconds = float(m.group(1)) * _DURATION_UNITS[m.group(3)]
        if seconds is None or not seconds >= 0:  # NaN is not >= 0
            self.error(
                path,
                f"{_shown(value)} is not a duration",
                'use seconds (2, 0.5) or "500ms", "2s", "1m"',
            )
            return None
        if seconds > limit:
            self.error(
                path, f"{_shown(value)} is longer than {span(limit)}", f"use at most {span(limit)}"
            )
            return None
        return seconds

    def command(self, value: Any, path: KeyPath, shell: bool = False) -> tuple[str, ...] | None:
        """A command as words; with ``shell``, a string follows the Procfile's rule: it runs
        under ``sh -c`` as written when it needs a shell (``&&``, pipes, redirections …)."""
        if isinstance(value, str):
            import shlex

            from shipway.spec.procfile import command_words

            try:
                parts = command_words(value) if shell else tuple(shlex.split(value))
            except ValueError as exc:
                self.error(path, f"cannot be split into words: {exc}", "check the quotes")
                return None
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            parts = tuple(value)
        else:
            self.error(path, f"must be a string or a list of strings, not {kind_of(value)}")
            return None
        if not parts:
            self.error(path, "is empty", "give the command to run")
            return None
        return parts

    def choice(self, value: Any, path: KeyPath, choices: tuple[T, ...]) -> T | None:
        if value not in choices:
            self.error(path, f"{value!r} is not one of: {', '.join(map(str, choices))}")
            return None
        return cast(T, value)


def _shown(value: Any) -> str:
    """A value as an error quotes it: a 4,000-digit number is not worth a screen."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"


def span(seconds: float) -> str:
    """A bound in the units a user writes: 300 → "5m", 3600 → "1h"."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def kind_of(value: Any) -> str:
    return {
        dict: "a table",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)
