"""``shipway logs`` on this machine: every process's log interleaved by the time each line
was written (launch.py stamps them), the last N lines or those since a time, of what runs
or of one release's instances — a failed release's too, whose programs are gone but whose
logs stay.

When nothing runs, the view says what it shows instead, never another release's log in
silence: after ``stop`` the deployed release's last logs; after a failed first deploy the
failed release's. Every line is masked (spec.secrets.Masker) before anyone sees it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from shipway.backends.local import logfiles
from shipway.backends.local.dirs import SlotDirs
from shipway.backends.local.records import read_programs
from shipway.backends.local.state import LocalState
from shipway.backends.logs import LogLine, LogQuery, LogView
from shipway.errors import InputError
from shipway.release import history
from shipway.release.model import Release
from shipway.spec.model import Target

Sources = Callable[[], list[tuple[str, Path]]]
_INSTANCE_LOG = re.compile(r"^(?P<process>[^.]+)\.(?P<dep>[^.]+)\.(?P<n>\d+)\.log$")


class LocalLogs(LocalState):
    """The protocol's ViewsLogs, and Reads.logs (the same view, as text lines)."""

    def log_view(self, target: Target, query: LogQuery) -> LogView:
        d = self.dirs(target)
        process = query.process
        if process is not None and process not in self.app.processes:
            raise InputError(
                f"no process {process!r} in {self.app.name} "
                f"(processes: {', '.join(self.app.processes)})"
            )
        records = self._records(d)
        about, sources = self._what_to_show(d, target, records, query)
        redact = self._redactor(d)
        first = logfiles.last_lines(sources(), query.lines, query.since, redact)
        lines: Iterator[LogLine] = iter(first)
        if query.follow:
            lines = itertools.chain(first, logfiles.follow(sources, redact))
        return LogView(about=about, lines=lines)

    def logs(self, target: Target, process: str | None, follow: bool, lines: int) -> Iterator[str]:
        view = self.log_view(target, LogQuery(process=process, lines=lines, follow=follow))
        return (f"{line.source} | {line.text}" for line in view.lines)

    # -- which logs ------------------------------------------------------------------

    def _what_to_show(
        self, d: SlotDirs, target: Target, records: list[Release], query: LogQuery
    ) -> tuple[str | None, Sources]:
        process = query.process
        if query.release is not None:
            release = history.find(records, query.release)
            if release is None:
                known = ", ".join(f"r{r.revision}" for r in history.ordered(records)) or "none"
                raise InputError(
                    f"no release r{query.release} in {target} (releases: {known}; "
                    "hint: shipway history)"
                )
            running = any(r.release == release.name for r in read_programs(d).values())
            state = "running" if running else f"{release.status}, nothing of it runs"
            return (
                f"the logs of r{release.revision} ({state})",
                lambda: self._release_sources(d, release, process),
            )
        if self._running_sources(d, process):
            return None, lambda: self._running_sources(d, process)
        deployed = history.deployed(records)
        if deployed is not None:
            return (
                f"nothing runs in {target} (stopped): the last logs of r{deployed.revision}, "
                "the deployed release",
                lambda: self._release_sources(d, deployed, process),
            )
        ordered = history.ordered(records)
        if ordered:
            newest = ordered[-1]
            return (
                f"nothing runs in {target}: r{newest.revision} {newest.status}, "
                "nothing was deployed before it; its logs",
                lambda: self._release_sources(d, newest, process),
            )
        return f"nothing was deployed to {target}: no logs yet", list

    def _running_sources(self, d: SlotDirs, process: str | None) -> list[tuple[str, Path]]:
        out: list[tuple[str, Path]] = []
        recs = sorted(read_programs(d).values(), key=lambda r: (r.process, r.revision))
        for rec in recs:
            if process is not None and rec.process != process:
                continue
            for i, inst in enumerate(rec.instances):
                out.append((f"{rec.process}.{i + 1}@{rec.release}", inst.log))
        return out

    def _release_sources(
        self, d: SlotDirs, release: Release, process: str | None
    ) -> list[tuple[str, Path]]:
        """A release's instances' logs (found by its deployment ids: they outlive the
        programs), and its release command's."""
        out: list[tuple[str, Path]] = []
        for name, dep in sorted(release.deployment_ids.items()):
            if process is not None and name != process:
                continue
            for path in sorted(d.logs.glob(f"{name}.{dep}.*.log")):
                m = _INSTANCE_LOG.match(path.name)
                if m is not None:
                    out.append((f"{name}.{int(m.group('n')) + 1}@r{release.revision}", path))
        command_log = d.logs / f"_release-r{release.revision}.log"
        if process is None and command_log.exists():
            out.append((f"release@r{release.revision}", command_log))
        return out
