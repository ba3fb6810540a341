"""Release records: revision N of an app in a slot, as the target itself keeps it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from shipway.release.artifact import Artifact
from shipway.release.audit import Audit

SourceType = Literal["dockerfile", "herokuish", "pack", "local"]
SOURCE_TYPES: tuple[SourceType, ...] = ("dockerfile", "herokuish", "pack", "local")


class ReleaseStatus(StrEnum):
    PENDING = "pending"
    DEPLOYED = "deployed"
    FAILED = "failed"
    SUPERSEDED = "superseded"


def now_utc() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class ImageMeta:
    """What kind of image a release runs; decides the start command (/start, launcher …).
    ``exposed_port``: the first TCP port the image EXPOSEs (None: it exposes none, or the
    record predates it — an older shipway reading a newer record ignores the key)."""

    source_type: SourceType
    working_dir: str | None = None
    exposed_port: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "source_type": self.source_type,
            "working_dir": self.working_dir,
            "exposed_port": self.exposed_port,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImageMeta:
        port = data.get("exposed_port")
        return cls(
            source_type=data["source_type"],
            working_dir=data.get("working_dir"),
            exposed_port=int(port) if port is not None else None,
        )


BuildKind = Literal["image", "environment"]


@dataclass(frozen=True)
class BuildRecord:
    """What a release's build phase made: an ``image`` (Docker, Kubernetes) or a dependency
    ``environment`` (local); ``what`` names it (the image's content-addressed tag, the
    environment's directory), ``inputs`` is the content digest of what it was built from,
    ``result`` the image digest or the environment's id. ``reused``: the same inputs had been
    built before, and nothing was built this time. ``duration``: seconds the phase took."""

    kind: BuildKind
    what: str
    inputs: str
    result: str
    source: str = ""
    reused: bool = False
    duration: float = 0.0

    def describe(self) -> str:
        verb = "reused" if self.reused else f"built in {self.duration:.1f}s"
        return f"{self.kind} {self.what} {verb} (inputs {self.inputs[:19]}…, {self.result})"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "what": self.what,
            "inputs": self.inputs,
            "result": self.result,
            "source": self.source,
            "reused": self.reused,
            "duration": round(self.duration, 3),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildRecord:
        return cls(
            kind=data["kind"],
            what=str(data["what"]),
            inputs=str(data["inputs"]),
            result=str(data["result"]),
            source=str(data.get("source", "")),
            reused=bool(data.get("reused", False)),
            duration=float(data.get("duration", 0.0)),
        )


@dataclass(frozen=True)
class SecretMarks:
    """Which secret values a release ran with, comparable within one slot's records and
    nowhere else: per secret, HMAC-SHA256 of its value under a random salt that the slot's
    records share (a new slot draws its own). They let a diff say *which* secret changed
    between two releases from the records alone.

    Kept in the record only: plans, diffs, history, status and every JSON form leave them
    out, so no output holds anything a guessed value could be matched against."""

    salt: str = ""
    marks: Mapping[str, str] = field(default_factory=dict)

    def same(self, other: SecretMarks, name: str) -> bool | None:
        """Whether secret ``name`` had the same value in both; None: the records cannot
        tell (a record older than marks, or marks under another salt)."""
        if not self.salt or self.salt != other.salt:
            return None
        mine, theirs = self.marks.get(name), other.marks.get(name)
        if mine is None or theirs is None:
            return None
        return mine == theirs

    def __repr__(self) -> str:  # never the marks themselves, in any message or log
        return f"SecretMarks({len(self.marks)} marks)"

    def to_json(self) -> dict[str, Any]:
        return {"salt": self.salt, "marks": dict(self.marks)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> SecretMarks:
        if not data:
            return cls()
        return cls(salt=str(data.get("salt", "")), marks=dict(data.get("marks") or {}))


@dataclass(frozen=True)
class Release:
    app: str
    slot: str
    revision: int
    status: ReleaseStatus
    image: str | None = None
    digest: str | None = None
    image_meta: ImageMeta | None = None
    deployment_ids: Mapping[str, str] = field(default_factory=dict)
    spec: Mapping[str, Any] = field(default_factory=dict)
    config_hash: str = ""
    artifact: Artifact = field(default_factory=Artifact)
    description: str = ""
    created_at: str = field(default_factory=now_utc)
    updated_at: str = field(default_factory=now_utc)
    actor: str = ""
    generation: str | None = None
    secret_marks: SecretMarks = field(default_factory=SecretMarks)
    #: what the build phase made (None: nothing was built, e.g. an image built elsewhere)
    build: BuildRecord | None = None
    #: a canary's steps as they were decided (share, verdict, why, the counts that made it)
    canary: tuple[Mapping[str, Any], ...] = ()
    #: who made it, under which clearance, what it changed (release/audit.py)
    audit: Audit | None = None

    @property
    def name(self) -> str:
        return f"r{self.revision}"

    def image_ref(self) -> str | None:
        """The most exact reference to the image: by digest when one is recorded."""
        if self.digest and self.image and self.digest.startswith("sha256:"):
            repo = self.image.split("@", 1)[0]
            last = repo.rsplit("/", 1)[-1]
            if ":" in last:
                repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
            return f"{repo}@{self.digest}"
        return self.image

    def with_status(self, status: ReleaseStatus, description: str | None = None) -> Release:
        return replace(
            self,
            status=status,
            description=self.description if description is None else description,
            updated_at=now_utc(),
        )

    def summary(self) -> dict[str, Any]:
        """The history line: everything but the bulky spec snapshot and artifact."""
        return {
            "revision": self.revision,
            "status": str(self.status),
            "image": self.image,
            "digest": self.digest,
            "description": self.description,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "actor": self.actor,
            "generation": self.generation,
            "build": self.build.to_json() if self.build else None,
            "audit": self.audit.to_json() if self.audit else None,
            **({"canary": [dict(step) for step in self.canary]} if self.canary else {}),
        }
