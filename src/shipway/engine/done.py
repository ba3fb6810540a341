"""How an operation that records no release ended: ``stop``, ``destroy``, ``restore``,
``run``, ``sleep``, ``wake``, ``gc``, ``freeze``, ``unfreeze``, ``build``.

Its ``ended`` event is made from it as a rollout's is from its outcome (engine/telling.py:
the same fields, the same one place): ``outcome`` is ``done`` — or ``failed`` for a one-off
command that exited non-zero (its exit code is the command's) — with a headline, details and
the JSON form ``-o json`` prints (``result``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DONE = "done"
#: a one-off command that ran and exited non-zero (or was stopped by a signal)
FAILED = "failed"


@dataclass(frozen=True)
class Done:
    operation: str
    target: str
    headline: str
    result: Mapping[str, Any] = field(default_factory=dict)
    more: tuple[str, ...] = ()
    exit_code: int = 0
    kind: str = DONE

    def line(self) -> str:
        return self.headline

    def details(self) -> list[str]:
        return list(self.more)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.kind,
            "operation": self.operation,
            "target": self.target,
            "exit_code": self.exit_code,
            **self.result,
        }
