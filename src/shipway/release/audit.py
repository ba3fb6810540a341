"""Who made a release, under which clearance, and what it changed — kept in the release
record itself, in the target, so every machine reads the same trail (``shipway audit``).

``user`` and ``host``: the OS user and the machine that ran shipway. ``commit`` and
``author``: the source directory's git HEAD and its author, when it is a git checkout.
``ci``: the CI system's identity when shipway runs in one (engine/who.py names the
variables read). ``clearance``: what the guard and the request were given — ``confirm``
(the slot's name typed back), ``take-host``, ``take-over``, ``break-glass`` (with its
reason in ``break_glass``). ``summary``: the change, in one line (``image 1a2b…→3c4d…``).

Never a secret: none of these is read from a secret, and CI tokens are never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: the clearances a record can name, in the order they are listed
CLEARANCES = ("confirm", "take-host", "take-over", "break-glass")


@dataclass(frozen=True)
class Audit:
    user: str
    host: str
    commit: str | None = None
    author: str | None = None
    ci: Mapping[str, str] = field(default_factory=dict)
    clearance: tuple[str, ...] = ()
    break_glass: str | None = None
    summary: str = ""
    operation: str = ""

    def who(self) -> str:
        """One phrase: ``alice@build-3 (ci github-actions octocat) at 1a2b3c4d``."""
        out = f"{self.user}@{self.host}"
        if self.ci:
            out += f" (ci {self.ci.get('system', '?')}"
            out += f" {self.ci['actor']})" if self.ci.get("actor") else ")"
        if self.commit:
            out += f" at {self.commit[:12]}"
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "host": self.host,
            "commit": self.commit,
            "author": self.author,
            "ci": dict(self.ci),
            "clearance": list(self.clearance),
            "break_glass": self.break_glass,
            "summary": self.summary,
            "operation": self.operation,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Audit | None:
        if not data:
            return None
        return cls(
            user=str(data.get("user", "")),
            host=str(data.get("host", "")),
            commit=data.get("commit"),
            author=data.get("author"),
            ci={str(k): str(v) for k, v in (data.get("ci") or {}).items()},
            clearance=tuple(str(c) for c in data.get("clearance") or ()),
            break_glass=data.get("break_glass"),
            summary=str(data.get("summary", "")),
            operation=str(data.get("operation", "")),
        )
