"""Freezes: when a slot takes no change. Two kinds, one shape for the Guard:

* declared in the spec, per slot — ``freeze = [{ start, end, timezone, reason }]``, each a
  window that recurs every week (``start = "fri 18:00"``, ``end = "mon 08:00"``), every day
  (``start = "22:00"``, ``end = "06:00"``), or spans dates (``start = "2026-12-24"``,
  ``end = "2027-01-02"``: through the end of that day; or ISO times). ``timezone`` (an IANA
  name, default UTC) is where the times are read;
* set by ``shipway freeze SLOT --for 2h --reason TEXT``, kept in the slot's target (every
  machine sees it) until it ends or ``shipway unfreeze SLOT`` lifts it.

Either becomes a :class:`Freeze` (reason, until, who set it) at the moment the Guard asks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any, Literal

from shipway.spec.check import Checker
from shipway.spec.locate import KeyPath

FREEZE_KEYS = ("start", "end", "timezone", "reason")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_CLOCK = re.compile(r"^(?:(mon|tue|wed|thu|fri|sat|sun)[a-z]*\s+)?([01]?\d|2[0-3]):([0-5]\d)$")
WEEK = 7 * 24 * 60


@dataclass(frozen=True)
class Freeze:
    """A slot frozen now: why, until when (ISO, UTC), who froze it, and from where
    (``target``: set by ``shipway freeze``; ``spec``: a declared window)."""

    reason: str
    until: str
    by: str = ""
    since: str = ""
    source: Literal["target", "spec"] = "target"

    def holds(self, now: datetime) -> bool:
        return datetime.fromisoformat(self.until) > now

    def line(self) -> str:
        who = f", by {self.by}" if self.by else ""
        where = "declared in the spec" if self.source == "spec" else f"set{who}"
        return f"frozen until {self.until} ({where}): {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "until": self.until,
            "by": self.by,
            "since": self.since,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Freeze:
        return cls(
            reason=str(data["reason"]),
            until=str(data["until"]),
            by=str(data.get("by", "")),
            since=str(data.get("since", "")),
            source="spec" if data.get("source") == "spec" else "target",
        )


@dataclass(frozen=True)
class Window:
    """A declared freeze window. ``every``: ``week`` or ``day`` (minutes from the week's or
    day's start in ``timezone``), or ``dates`` (``first``/``last`` as aware datetimes)."""

    every: Literal["week", "day", "dates"]
    reason: str
    timezone: str = "UTC"
    start: int = 0
    end: int = 0
    first: datetime | None = None
    last: datetime | None = None

    def freeze_at(self, now: datetime) -> Freeze | None:
        """The freeze this window holds at ``now`` (aware), or None."""
        if self.every == "dates":
            assert self.first is not None and self.last is not None
            if self.first <= now < self.last:
                return self._freeze(self.last)
            return None
        local = now.astimezone(_zone(self.timezone))
        period = WEEK if self.every == "week" else 24 * 60
        midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
        base = midnight - timedelta(days=local.weekday() if self.every == "week" else 0)
        minute = int((local - base).total_seconds() // 60)
        began = base + timedelta(minutes=self.start - (period if self.start > minute else 0))
        length = (self.end - self.start) % period or period
        ends = began + timedelta(minutes=length)
        return self._freeze(ends) if local < ends else None

    def _freeze(self, until: datetime) -> Freeze:
        at = until.astimezone(UTC).isoformat(timespec="seconds")
        return Freeze(self.reason, at, source="spec")


def _zone(name: str) -> tzinfo:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def _known_zone(name: str) -> bool:
    from zoneinfo import ZoneInfoNotFoundError

    try:
        _zone(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def _clock(text: str) -> tuple[int | None, int] | None:
    """``fri 18:00`` → (4, 1080); ``22:00`` → (None, 1320); None: not a clock time."""
    m = _CLOCK.match(text.strip().lower())
    if m is None:
        return None
    day = DAYS.index(m.group(1)) if m.group(1) else None
    return day, int(m.group(2)) * 60 + int(m.group(3))


def _moment(text: str, zone: tzinfo, end: bool) -> datetime | None:
    """A date (an ``end`` date: through that day) or an ISO time, in ``zone`` unless it
    names its own offset."""
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            day = date.fromisoformat(text) + timedelta(days=1 if end else 0)
            return datetime.combine(day, time(), zone)
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=zone)


def parse_windows(c: Checker, raw: Any, path: KeyPath) -> tuple[Window, ...]:
    """``slots.NAME.freeze``: a list of windows (every problem reported, with its key)."""
    hint = (
        'e.g. freeze = [{ start = "fri 18:00", end = "mon 08:00", timezone = "Europe/Paris", '
        'reason = "weekend" }]'
    )
    if not isinstance(raw, list):
        c.error(path, "must be a list of windows", hint)
        return ()
    out: list[Window] = []
    for i, item in enumerate(raw):
        here = (*path, str(i))
        t = c.table(item, here, FREEZE_KEYS)
        if t is None:
            continue
        window = _window(c, t, here, hint)
        if window is not None:
            out.append(window)
    return tuple(out)


def _window(c: Checker, t: Mapping[str, Any], here: KeyPath, hint: str) -> Window | None:
    missing = [k for k in ("start", "end", "reason") if k not in t]
    for key in missing:
        c.error((*here, key), "is required", hint)
    zone_name = c.string(t.get("timezone", "UTC"), (*here, "timezone")) or "UTC"
    if not _known_zone(zone_name):
        c.error((*here, "timezone"), f"{zone_name!r} is not a known time zone", 'e.g. "UTC"')
        return None
    if missing:
        return None
    reason = c.string(t["reason"], (*here, "reason"))
    start, end = (c.string(t[k], (*here, k)) for k in ("start", "end"))
    if reason is None or start is None or end is None:
        return None
    a, b = _clock(start), _clock(end)
    if a is not None and b is not None:
        if (a[0] is None) != (b[0] is None):
            c.error((*here, "end"), "names a day where start does not (or the other way)", hint)
            return None
        if a[0] is None or b[0] is None:
            return Window("day", reason, zone_name, a[1], b[1])
        return Window("week", reason, zone_name, a[0] * 1440 + a[1], b[0] * 1440 + b[1])
    zone = _zone(zone_name)
    first, last = _moment(start, zone, False), _moment(end, zone, True)
    for key, value, moment in (("start", start, first), ("end", end, last)):
        if moment is None:
            c.error(
                (*here, key),
                f"{value!r} is neither a time (fri 18:00, 22:00) nor a date",
                "use a weekday and time, a time, or a date (2026-12-24) or ISO time",
            )
    if first is None or last is None:
        return None
    if last <= first:
        c.error((*here, "end"), f"{end!r} is not after start {start!r}", hint)
        return None
    return Window("dates", reason, zone_name, first=first, last=last)


def active(windows: Sequence[Window], kept: Sequence[Freeze], now: datetime) -> list[Freeze]:
    """The freezes that hold ``slot`` at ``now``: those kept in its target, then the
    spec's windows."""
    held = [f for f in kept if f.holds(now)]
    held += [f for w in windows if (f := w.freeze_at(now)) is not None]
    return held
