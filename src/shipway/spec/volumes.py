"""Volumes: an app's data in a slot, which outlives every release (invariant 11).

``[volumes.NAME]`` declares one: ``path`` (relative to the app's working directory, or
absolute inside a container), ``processes`` (default: every process), and for Kubernetes
``size`` (default ``1Gi``), ``storage_class`` and ``access_mode`` (``ReadWriteOnce`` by
default, or ``ReadWriteMany``).

What must never happen: a path that leaves the app's directory (``..``), a path that is the
app itself (``.``), two volumes (or a volume and a config file) claiming one place, or an
absolute path on a local slot, where it would be a path on this machine rather than inside
a container. Each is refused here, with its key, before anything is touched.

A volume is a directory on every backend (a directory of the state dir, a Docker volume, a
claim), never a single file: a path the app's directory holds as a file, or one named like a
database file (``*.sqlite3``, ``*.sqlite``, ``*.db``), is refused when the spec file is read,
with the fix — a directory volume, and the app pointed at the file inside it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from shipway.spec.check import Checker
from shipway.spec.locate import KeyPath

if TYPE_CHECKING:
    from shipway.spec.model import ConfigFile, Process, Slot

AccessMode = Literal["ReadWriteOnce", "ReadWriteMany"]
ACCESS_MODES: tuple[AccessMode, ...] = ("ReadWriteOnce", "ReadWriteMany")
DEFAULT_SIZE = "1Gi"
VOLUME_KEYS = ("path", "processes", "size", "storage_class", "access_mode")

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?(k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
#: names of database files (SQLite's above all): data, never part of a release
DATABASE_SUFFIXES = (".sqlite3", ".sqlite", ".db")
_CLASS = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class Volume:
    """One named volume of the app. ``path`` is normalised (no ``.`` parts, no trailing
    ``/``); ``processes`` None means every process mounts it."""

    name: str
    path: str
    processes: tuple[str, ...] | None = None
    size: str = DEFAULT_SIZE
    storage_class: str | None = None
    access_mode: AccessMode = "ReadWriteOnce"

    def mounted_by(self, process: str) -> bool:
        return self.processes is None or process in self.processes

    @property
    def absolute(self) -> bool:
        return self.path.startswith("/")

    def target(self, working_dir: str | None) -> str:
        """Where it is mounted inside a container whose working directory is given."""
        if self.absolute:
            return self.path
        return (working_dir or "/").rstrip("/") + "/" + self.path

    def to_json(self) -> dict[str, Any]:
        """The spec's own form (what a release record's snapshot keeps)."""
        out: dict[str, Any] = {"path": self.path}
        if self.processes is not None:
            out["processes"] = list(self.processes)
        if self.size != DEFAULT_SIZE:
            out["size"] = self.size
        if self.storage_class is not None:
            out["storage_class"] = self.storage_class
        if self.access_mode != "ReadWriteOnce":
            out["access_mode"] = self.access_mode
        return out


def mounted_by(volumes: Mapping[str, Volume], process: str) -> list[Volume]:
    """The volumes one process mounts, by name."""
    return [v for _, v in sorted(volumes.items()) if v.mounted_by(process)]


def parse_volumes(
    c: Checker, raw: Any, processes: Mapping[str, Process], files: Sequence[ConfigFile]
) -> dict[str, Volume]:
    """``[volumes.*]``: each checked on its own, then against the others and the files."""
    table = c.table(raw, ("volumes",)) or {}
    out: dict[str, Volume] = {}
    for name, vraw in table.items():
        path: KeyPath = ("volumes", name)
        if not _NAME.match(name):
            c.error(
                path,
                f"{name!r} is not a valid volume name",
                "lowercase letters, digits and '-', at most 40 characters",
            )
            continue
        v = c.table(vraw, path, VOLUME_KEYS)
        if v is None:
            continue
        volume = _volume(c, name, v, path, processes)
        if volume is not None:
            out[name] = volume
    _check_places(c, out, files)
    return out


def _volume(
    c: Checker, name: str, v: Mapping[str, Any], path: KeyPath, processes: Mapping[str, Process]
) -> Volume | None:
    where = None
    if "path" not in v:
        c.error((*path, "path"), "is required", 'e.g. path = "data" (inside the app\'s directory)')
    else:
        where = _place(c, v["path"], (*path, "path"))
    users: tuple[str, ...] | None = None
    if "processes" in v:
        users = _users(c, v["processes"], (*path, "processes"), processes)
    size = DEFAULT_SIZE
    if "size" in v:
        size = (
            c.string(
                v["size"],
                (*path, "size"),
                pattern=_SIZE,
                what="size",
                hint='a storage quantity, e.g. "1Gi", "500Mi", "10G"',
            )
            or DEFAULT_SIZE
        )
    storage_class = (
        c.string(
            v["storage_class"],
            (*path, "storage_class"),
            pattern=_CLASS,
            what="storage class name",
            hint="the name of a StorageClass of the cluster (kubectl get storageclass)",
        )
        if "storage_class" in v
        else None
    )
    mode = c.choice(v.get("access_mode", "ReadWriteOnce"), (*path, "access_mode"), ACCESS_MODES)
    if where is None or mode is None or ("processes" in v and users is None):
        return None
    return Volume(name, where, users, size, storage_class, mode)


def _place(c: Checker, raw: Any, path: KeyPath) -> str | None:
    text = c.string(raw, path, hint='a directory, e.g. path = "data" or path = "/var/lib/app"')
    if text is None:
        return None
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        c.error(
            path,
            f"{text!r} leaves the app's directory ('..')",
            'name a directory inside it, e.g. "data", or an absolute path inside containers',
        )
        return None
    if not parts:
        what = "the root directory" if text.startswith("/") else "the app's directory itself"
        c.error(path, f"{text!r} is {what}", 'name a directory inside it, e.g. "data"')
        return None
    normal = posixpath.join(*parts)
    return "/" + normal if text.startswith("/") else normal


def _users(
    c: Checker, raw: Any, path: KeyPath, processes: Mapping[str, Process]
) -> tuple[str, ...] | None:
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        c.error(path, "must be a list of process names", 'e.g. processes = ["web"]')
        return None
    if not raw:
        c.error(path, "is empty: no process would mount the volume", "name at least one process")
        return None
    unknown = [n for n in raw if processes and n not in processes]
    for n in unknown:
        c.error(path, f"no process named {n!r}", "declared: " + ", ".join(processes))
    return None if unknown else tuple(dict.fromkeys(raw))


def _inside(a: str, b: str) -> bool:
    """``a`` is ``b`` or lies under it."""
    return a == b or a.startswith(b.rstrip("/") + "/")


def _check_places(c: Checker, volumes: Mapping[str, Volume], files: Sequence[ConfigFile]) -> None:
    """One place, one owner: a volume inside another (or at its path) would hide it, and a
    config file inside a volume would be written into the data of every release."""
    seen: list[Volume] = []
    for volume in volumes.values():
        for other in seen:
            if _inside(volume.path, other.path) or _inside(other.path, volume.path):
                c.error(
                    ("volumes", volume.name, "path"),
                    f"{volume.path!r} overlaps volume {other.name!r} ({other.path!r})",
                    "give each volume its own directory, neither inside the other",
                )
        seen.append(volume)
        for f in files:
            if not volume.absolute and (
                _inside(f.path, volume.path) or _inside(volume.path, f.path)
            ):
                c.error(
                    ("volumes", volume.name, "path"),
                    f"{volume.path!r} holds the config file {f.path!r}",
                    "move the file out of the volume, or the volume away from the file",
                )


def check_volume_slots(
    c: Checker, volumes: Mapping[str, Volume], slots: Mapping[str, Slot]
) -> None:
    """A local slot runs the app from its own directory on this machine: an absolute path
    there would be a path of this machine, not one inside a container."""
    local = [name for name, s in slots.items() if s.backend == "local"]
    if not local:
        return
    for volume in volumes.values():
        if volume.absolute:
            c.error(
                ("volumes", volume.name, "path"),
                f"{volume.path!r} is absolute, but slot {local[0]!r} runs processes locally",
                "on a local slot a volume's path is relative to the app's directory, e.g. \"data\"",
            )


def database_fix(file: str, volume: str = "data") -> str:
    """The fix for a database file at ``file`` (relative to the app) that must outlive every
    release: a directory volume holding it, and the app pointed at the file inside it."""
    parent, name = posixpath.split(file)
    where = parent or "data"
    inside = f"{where}/{name}"
    point = f"point the app at {inside}"
    if name == "db.sqlite3":  # Django's default database
        point += f' (Django settings: DATABASES["default"]["NAME"] = BASE_DIR / "{where}"'
        point += f' / "{name}")'
    return (
        f'declare a directory volume, [volumes.{volume}] path = "{where}" in the spec, and '
        f"{point}; move the app's own copy into {where}/ (it stays on this machine, never "
        "in a release)"
    )


def check_file_volumes(c: Checker, volumes: Mapping[str, Volume], base_dir: Path) -> None:
    """A volume is a directory on every backend: a relative path that is a file in the app,
    or named like a database file, would be a directory in each release where the app
    expects its file (SQLite: "unable to open database file")."""
    for volume in volumes.values():
        if volume.absolute:
            continue
        is_file = (base_dir / volume.path).is_file()
        named = volume.path.rsplit("/", 1)[-1].endswith(DATABASE_SUFFIXES)
        if not (is_file or named):
            continue
        why = "is a file in the app's directory" if is_file else "names a database file"
        c.error(
            ("volumes", volume.name, "path"),
            f"{volume.path!r} {why}, but a volume is a directory on every backend (a file "
            "cannot be one: the app would find a directory where it expects its file)",
            database_fix(volume.path, volume.name),
        )
