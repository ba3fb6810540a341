"""Rules over a slot's release history. Pure functions of the records."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shipway.release.model import Release, ReleaseStatus

DEFAULT_LIMIT = 10


def ordered(records: Iterable[Release]) -> list[Release]:
    return sorted(records, key=lambda r: r.revision)


def next_revision(records: Iterable[Release]) -> int:
    return max((r.revision for r in records), default=0) + 1


def deployed(records: Iterable[Release]) -> Release | None:
    """The anchor: the highest deployed revision (what runs now)."""
    live = [r for r in records if r.status == ReleaseStatus.DEPLOYED]
    return max(live, key=lambda r: r.revision) if live else None


def find(records: Iterable[Release], revision: int) -> Release | None:
    return next((r for r in records if r.revision == revision), None)


def pending(records: Iterable[Release]) -> list[Release]:
    return [r for r in ordered(records) if r.status == ReleaseStatus.PENDING]


def promote_to_deployed(records: Iterable[Release], new: Release) -> list[Release]:
    """The records to write when ``new`` succeeds: it deployed, every other deployed superseded."""
    out = [new.with_status(ReleaseStatus.DEPLOYED)]
    for r in records:
        if r.revision != new.revision and r.status == ReleaseStatus.DEPLOYED:
            out.append(r.with_status(ReleaseStatus.SUPERSEDED))
    return out


def over_limit(records: Sequence[Release], limit: int = DEFAULT_LIMIT) -> list[int]:
    """Revisions to delete so at most ``limit`` remain; never the latest deployed one."""
    keep = deployed(records)
    candidates = [r for r in ordered(records) if keep is None or r.revision != keep.revision]
    excess = len(records) - limit
    return [r.revision for r in candidates[: max(excess, 0)]]
