"""The four honest outcomes of a rollout, and "no changes". Only ``rolled`` (and
``unchanged``, when nothing differed and nothing was done) is success; each has its own
exit code, one-line text and JSON form. A failed rollback is never collapsed into
"failed": it says the slot MAY BE DOWN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from shipway.backends.protocol import Failure

EXIT_ROLLED = 0
EXIT_ROLLED_BACK = 10
EXIT_ROLLBACK_FAILED = 11
EXIT_NO_ANCHOR = 12


@dataclass(frozen=True)
class Outcome:
    kind: ClassVar[str] = ""
    exit_code: ClassVar[int] = 1

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def line(self) -> str:
        raise NotImplementedError

    def details(self) -> list[str]:
        """Further lines under the headline (failure details, warnings)."""
        return []

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


def _warnings(warnings: tuple[str, ...]) -> list[str]:
    return [f"warning: {w}" for w in warnings]


@dataclass(frozen=True)
class Rolled(Outcome):
    kind: ClassVar[str] = "rolled"
    exit_code: ClassVar[int] = EXIT_ROLLED
    target: str
    from_revision: int | None
    to_revision: int
    warnings: tuple[str, ...] = ()
    #: the rollout is what the outcome says, but the records could not be written: they
    #: lag behind, and the next operation on the slot repairs them
    records_behind: bool = False

    def line(self) -> str:
        start = f"r{self.from_revision}" if self.from_revision else "nothing"
        return f"rolled {self.target} from {start} to r{self.to_revision}"

    def details(self) -> list[str]:
        return _warnings(self.warnings)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.kind,
            "target": self.target,
            "from": self.from_revision,
            "to": self.to_revision,
            "warnings": list(self.warnings),
            "records_behind": self.records_behind,
        }


def _serving(revision: int | None, restored: str) -> str:
    """What an undo put back: a revision, and (set-image) the image it restored."""
    if revision is None:
        return restored or "the previous state"
    return f"r{revision}" + (f" ({restored})" if restored else "")


@dataclass(frozen=True)
class Unchanged(Outcome):
    """ "No changes": what runs is what the operation would make run, so nothing was
    applied and no revision recorded (the lock was held for the check only)."""

    kind: ClassVar[str] = "unchanged"
    exit_code: ClassVar[int] = EXIT_ROLLED
    target: str
    revision: int
    operation: str = "deploy"
    #: accessories that were down and were started (the app itself left as it runs)
    accessories_started: tuple[str, ...] = ()

    def line(self) -> str:
        if self.operation == "repair":
            what = f"runs r{self.revision} as recorded"
        else:
            what = f"already runs what this {self.operation} would run (r{self.revision})"
        hint = " (deploy --force redeploys anyway)" if self.operation == "deploy" else ""
        applied = "nothing applied"
        if self.accessories_started:
            names = ", ".join(self.accessories_started)
            applied = f"started accessory {names} (it was not running), nothing else applied"
        return f"no changes: {self.target} {what}; {applied}, no revision recorded{hint}"

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.kind,
            "target": self.target,
            "revision": self.revision,
            "operation": self.operation,
            "accessories_started": list(self.accessories_started),
        }


@dataclass(frozen=True)
class RolledBack(Outcome):
    """``to_revision`` None: no revision was deployed before, yet something was put back
    (``restored``: a set-image's anchor image)."""

    kind: ClassVar[str] = "rolled-back"
    exit_code: ClassVar[int] = EXIT_ROLLED_BACK
    target: str
    failed_revision: int
    to_revision: int | None
    failure: Failure
    warnings: tuple[str, ...] = ()
    records_behind: bool = False
    restored: str = ""

    def line(self) -> str:
        return (
            f"rolled back {self.target}: r{self.failed_revision} failed "
            f"({self.failure.headline()}); {_serving(self.to_revision, self.restored)} is "
            "serving again — the deploy is not done"
        )

    def details(self) -> list[str]:
        return self.failure.lines() + _warnings(self.warnings)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.kind,
            "target": self.target,
            "failed": self.failed_revision,
            "to": self.to_revision,
            "failure": self.failure.to_json(),
            "warnings": list(self.warnings),
            "records_behind": self.records_behind,
            **({"restored": self.restored} if self.restored else {}),
        }


@dataclass(frozen=True)
class RollbackFailed(Outcome):
    kind: ClassVar[str] = "rollback-failed"
    exit_code: ClassVar[int] = EXIT_ROLLBACK_FAILED
    target: str
    failed_revision: int
    anchor_revision: int | None
    failure: Failure
    rollback_failure: Failure
    warnings: tuple[str, ...] = ()
    records_behind: bool = False
    restored: str = ""

    def line(self) -> str:
        return (
            f"ROLLBACK FAILED for {self.target}: r{self.failed_revision} failed "
            f"({self.failure.headline()}) and restoring "
            f"{_serving(self.anchor_revision, self.restored)} failed too "
            f"({self.rollback_failure.headline()}) — the slot MAY BE DOWN"
        )

    def details(self) -> list[str]:
        return [
            "the deploy failed:",
            *self.failure.lines(),
            "the rollback failed:",
            *self.rollback_failure.lines(),
            *_warnings(self.warnings),
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.kind,
            "target": self.target,
            "failed": self.failed_revision,
            "anchor": self.anchor_revision,
            "failure": self.failure.to_json(),
            "rollback_failure": self.rollback_failure.to_json(),
            "may_be_down": True,
            "warnings": list(self.warnings),
            "records_behind": self.records_behind,
            **({"restored": self.restored} if self.restored else {}),
        }


@dataclass(frozen=True)
class NoAnchor(Outcome):
    kind: ClassVar[str] = "no-anchor"
    exit_code: ClassVar[int] = EXIT_NO_ANCHOR
    target: str
    failed_revision: int
    failure: Failure
    warnings: tuple[str, ...] = ()
    records_behind: bool = False

    def line(self) -> str:
        return (
            f"{self.target}: r{self.failed_revision} failed ({self.failure.headline()}); "
            "nothing was running before it, so nothing was restored"
        )

    def details(self) -> list[str]:
        return self.failure.lines() + _warnings(self.warnings)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.kind,
            "target": self.target,
            "failed": self.failed_revision,
            "failure": self.failure.to_json(),
            "warnings": list(self.warnings),
            "records_behind": self.records_behind,
        }


def outcome_from_json(data: dict[str, Any]) -> Outcome:
    kind = data["outcome"]
    warnings = tuple(data.get("warnings", ()))
    behind = bool(data.get("records_behind", False))
    if kind == Rolled.kind:
        return Rolled(data["target"], data["from"], data["to"], warnings, behind)
    if kind == Unchanged.kind:
        return Unchanged(
            data["target"],
            data["revision"],
            data.get("operation", "deploy"),
            tuple(data.get("accessories_started") or ()),
        )
    failure = _failure(data["failure"])
    if kind == RolledBack.kind:
        return RolledBack(
            data["target"],
            data["failed"],
            data["to"],
            failure,
            warnings,
            behind,
            data.get("restored", ""),
        )
    if kind == RollbackFailed.kind:
        return RollbackFailed(
            data["target"],
            data["failed"],
            data["anchor"],
            failure,
            _failure(data["rollback_failure"]),
            warnings,
            behind,
            data.get("restored", ""),
        )
    if kind == NoAnchor.kind:
        return NoAnchor(data["target"], data["failed"], failure, warnings, behind)
    raise ValueError(f"unknown outcome {kind!r}")


def _failure(data: dict[str, Any]) -> Failure:
    return Failure(
        reason=data["reason"],
        message=data["message"],
        process=data.get("process"),
        exit_code=data.get("exit_code"),
        details=tuple(data.get("details", ())),
    )
