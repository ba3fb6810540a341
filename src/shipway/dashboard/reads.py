"""What the dashboard shows, read through the API alone (never a backend): the overview of
every app and slot it knows, and one slot's page (its status, history, the diff of two
releases, generations, the tail of its logs).

The apps it knows are the specs it was given (read again on every look, so an edit shows)
and the apps in this machine's local state directories that no spec names (read back from
their own records, as ``shipway ls`` does). Every document it returns has passed through
:func:`masked`: the :class:`~shipway.spec.secrets.Masker` of every secret the known specs
resolve here, over every string — on top of the masking the reads already do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from shipway import api
from shipway.errors import InputError, SecretUnavailable, ShipwayError
from shipway.plan.diff import history_diffs
from shipway.spec.model import App
from shipway.spec.secrets import Masker

#: how many of a slot's last log lines its page shows
LOG_LINES = 100
#: the overview is read at most this often, however many pages poll it (seconds)
FRESH_FOR = 1.0


class NotFound(InputError):
    """The dashboard knows no such app and slot."""


def masked(doc: Mapping[str, Any], mask: Callable[[str], str]) -> dict[str, Any]:
    """``doc`` with every string in it (keys too) passed through ``mask``."""
    return dict(_masked(doc, mask))


def _masked(doc: Any, mask: Callable[[str], str]) -> Any:
    if isinstance(doc, str):
        return mask(doc)
    if isinstance(doc, Mapping):
        return {_masked(k, mask): _masked(v, mask) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [_masked(v, mask) for v in doc]
    return doc


def masker_of(apps: Iterable[App]) -> Masker:
    """The masker of every secret of ``apps`` that resolves here (an accessory's link and
    a variable not set here cannot be in anything this process reads)."""
    values = []
    for app in apps:
        for ref in app.secrets.values():
            with suppress(SecretUnavailable):
                values.append(ref.resolve())
    return Masker(values)


@dataclass
class Catalogue:
    """The specs given and the local state directories to list (none: the default one)."""

    specs: Sequence[Path] = ()
    state_dirs: Sequence[Path] = ()
    #: the last good read of each spec, kept when a later edit does not validate
    _apps: dict[Path, App] = field(default_factory=dict)

    def spec_apps(self) -> tuple[list[tuple[Path, App]], list[str]]:
        """Each spec read now (its last good read, and a problem, when it fails)."""
        out: list[tuple[Path, App]] = []
        problems: list[str] = []
        for path in self.specs:
            try:
                self._apps[path] = api.load(path)
            except ShipwayError as exc:
                problems.append(f"{path}: {exc}")
            if path in self._apps:
                out.append((path, self._apps[path]))
        return out, problems

    def find(self, app_name: str, slot: str) -> App:
        """The app a page is about: a spec's first, else the one its local records hold."""
        for _, app in self.spec_apps()[0]:
            if app.name == app_name and slot in app.slots:
                return app
        roots: list[Path | None] = [*self.state_dirs] or [None]
        for root in roots:
            with suppress(InputError):
                return api.recorded_app(app_name, slot, root)
        raise NotFound(f"no app {app_name!r} with a slot {slot!r} here")

    def masker(self, *more: App) -> Masker:
        return masker_of([*(a for _, a in self.spec_apps()[0]), *more])


def slot_row(status: api.SlotStatus, source: str) -> dict[str, Any]:
    """One slot on the overview: its state, live release, age and health at a glance."""
    deployed = status.deployed
    health = sorted({str(p.detail["health"]) for p in status.processes if p.detail.get("health")})
    return {
        "app": status.app,
        "slot": status.slot,
        "backend": status.backend,
        "source": source,
        "state": status.state.word,
        "state_line": status.state.line,
        "release": deployed.revision if deployed else None,
        "image": deployed.image if deployed else None,
        "description": deployed.description if deployed else None,
        "deployed_at": deployed.updated_at if deployed else None,
        "ready": sum(p.ready for p in status.processes),
        "desired": sum(p.desired for p in status.processes),
        "health": health,
    }


def _unreadable(app: str, slot: str, backend: str, source: str, exc: Exception) -> dict[str, Any]:
    return {
        "app": app, "slot": slot, "backend": backend, "source": source,
        "state": "unreadable", "state_line": f"{type(exc).__name__}: {exc}",
        "release": None, "image": None, "description": None, "deployed_at": None,
        "ready": 0, "desired": 0, "health": [],
    }  # fmt: skip


class Overview:
    """The overview document, served from the last read and read again in the background
    when that read is older than ``fresh_for`` seconds (one reader at a time, however many
    pages poll): a page never waits for 150 slots to be read, and sees them at most one
    read late. Only the first read, made when the server starts, is waited for. A slow read
    is made less often (``fresh_for`` becomes twice the last read's time), so the reads
    never take more than a third of one core, however slow the machine or many the slots."""

    def __init__(self, catalogue: Catalogue, fresh_for: float = FRESH_FOR) -> None:
        self.catalogue = catalogue
        self.fresh_for = self.at_least = fresh_for
        self._lock = threading.Lock()
        self._doc: dict[str, Any] | None = None
        self._at = 0.0
        self._reading: threading.Thread | None = None

    def get(self) -> dict[str, Any]:
        with self._lock:
            doc = self._doc
            stale = time.monotonic() - self._at >= self.fresh_for
            if doc is not None and stale and self._reading is None:
                self._reading = threading.Thread(target=self._refresh, daemon=True)
                self._reading.start()
        if doc is None:
            self._refresh()
            return self.get()
        return doc

    def _refresh(self) -> None:
        started = time.monotonic()
        try:
            doc = self.read()
        finally:
            with self._lock:
                self._reading = None
        with self._lock:
            self._doc, self._at = doc, time.monotonic()
            self.fresh_for = max(self.at_least, 2 * (self._at - started))

    def read(self) -> dict[str, Any]:
        started = time.perf_counter()
        specs, problems = self.catalogue.spec_apps()
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        wanted = [(path, app, slot) for path, app in specs for slot in app.slots.names()]

        def one(item: tuple[Path, App, str]) -> dict[str, Any]:
            path, app, slot = item
            source = f"spec {path}"
            try:
                return slot_row(api.status(app, slot), source)
            except Exception as exc:  # one slot's engine down: that slot says so, not the page
                return _unreadable(app.name, slot, app.slots.target(slot).backend, source, exc)

        with ThreadPoolExecutor(max_workers=8) as pool:
            for row in pool.map(one, wanted):
                rows[(row["app"], row["slot"])] = row
        try:
            for status in api.ls(self.catalogue.state_dirs):
                key = (status.app, status.slot)
                rows.setdefault(key, slot_row(status, "local state"))
        except ShipwayError as exc:
            problems.append(f"the local state: {exc}")
        apps: dict[str, list[dict[str, Any]]] = {}
        for key in sorted(rows):
            apps.setdefault(key[0], []).append(rows[key])
        doc = {
            "apps": [{"app": name, "slots": slots} for name, slots in apps.items()],
            "problems": problems,
            # when this read was made (epoch seconds) and how long it took
            "read_at": time.time(),
            "read_ms": round((time.perf_counter() - started) * 1000, 1),
        }
        return masked(doc, masker_of(app for _, app in specs))


def slot_page(catalogue: Catalogue, app_name: str, slot: str) -> dict[str, Any]:
    """A slot's page: what it is doing, its processes, volumes and accessories, its history
    (what each revision changed), its generations (blue-green) and the tail of its logs."""
    app = catalogue.find(app_name, slot)
    status = api.status(app, slot)
    releases = api.history(app, slot)
    diffs = history_diffs(releases)
    history = [{**r.summary(), "changed": diffs[r.revision].summary()} for r in releases]
    generations = []
    if any(r.generation for r in releases):
        generations = [g.to_json() for g in api.generations(app, slot)]
    doc = {
        **status.to_json(),
        "state_line": status.state.line,
        "history": history[::-1],  # newest first, as a page is read
        "generations": generations,
        "logs": log_tail(app, slot),
    }
    return masked(doc, catalogue.masker(app))


def log_tail(app: App, slot: str, lines: int = LOG_LINES) -> dict[str, Any]:
    """The last ``lines`` lines of every process, interleaved by time, secrets masked."""
    try:
        view = api.log_view(app, slot, lines=lines)
        got = [
            {"source": line.source, "at": line.at, "text": line.text}
            for line in islice(view.lines, lines)
        ]
    except Exception as exc:  # a backend that cannot read its logs: the page says so
        return {"about": None, "lines": [], "error": f"{type(exc).__name__}: {exc}"}
    return {"about": view.about, "lines": got, "error": None}


def release_diff(catalogue: Catalogue, app_name: str, slot: str, a: int, b: int) -> dict[str, Any]:
    """What differs between revisions ``a`` and ``b`` of a slot, from its records alone."""
    app = catalogue.find(app_name, slot)
    before, after = sorted((a, b))
    diff = api.diff(app, slot, before, after)
    doc = {**diff.to_json(), "lines": diff.describe(), "summary": diff.summary()}
    return masked(doc, catalogue.masker(app))
