"""Snapshots: an app's source directory, hashed and copied into the state directory.

The digest is the release's "image digest" on this backend: it names exactly the files a
release runs, so a promotion copies exactly what was tested, and a copy is verified
against it. Not part of a snapshot (and not of its digest): version-control and cache
directories (``IGNORED``), and the config files the spec declares (they are written into
each snapshot from the spec, with this slot's secrets).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from shipway.backends.local.dirs import write_json, writing

_REVISION_DIR = re.compile(r"^r(\d+)$")

IGNORED = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".venv",
        ".tox",
    }
)
IGNORED_SUFFIXES = (".pyc", ".pyo")


def _into(path: Path, dirs: frozenset[Path]) -> bool:
    """A symlink whose target lies inside one of ``dirs`` (the state directory): a volume
    placed in a kept snapshot is never part of another snapshot's copy or digest."""
    if not path.is_symlink():
        return False
    target = Path(os.path.realpath(path))
    return any(target.is_relative_to(d) for d in dirs)


def _walk(root: Path, exclude: frozenset[str], skip_dirs: frozenset[Path]) -> list[str]:
    """Relative paths under ``root`` (sorted, '/'-separated) that belong to a snapshot."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(root)
        keep_dirs = []
        for d in sorted(dirnames):
            full = here / d
            rel = (rel_dir / d).as_posix()
            if d in IGNORED or rel in exclude or full.resolve() in skip_dirs:
                continue
            if full.is_symlink() and _into(full, skip_dirs):  # a volume placed in a snapshot
                continue
            if full.is_symlink():
                out.append(rel)
                continue
            keep_dirs.append(d)
            out.append(rel + "/")
        dirnames[:] = keep_dirs
        for f in sorted(filenames):
            rel = (rel_dir / f).as_posix()
            if f.endswith(IGNORED_SUFFIXES) or rel in exclude:
                continue
            if _into(here / f, skip_dirs):  # a symlink into the state dir (a volume's)
                continue
            out.append(rel)
    return sorted(out)


def digest(root: Path, exclude: Iterable[str] = (), skip_dirs: Iterable[Path] = ()) -> str:
    """``sha256:<hex>`` over names, types, executable bits and contents."""
    h = hashlib.sha256()
    skip = frozenset(p.resolve() for p in skip_dirs)
    for rel in _walk(root, frozenset(exclude), skip):
        full = root / rel.rstrip("/")
        st = full.lstat()
        if stat.S_ISLNK(st.st_mode):
            h.update(b"L" + rel.encode() + b"\0" + os.readlink(full).encode() + b"\0")
        elif stat.S_ISDIR(st.st_mode):
            h.update(b"D" + rel.encode() + b"\0")
        elif stat.S_ISREG(st.st_mode):
            mode = b"x" if st.st_mode & 0o111 else b"-"
            fh = hashlib.sha256()
            with open(full, "rb") as f:
                while chunk := f.read(1 << 20):
                    fh.update(chunk)
            h.update(b"F" + mode + rel.encode() + b"\0" + fh.digest())
    return "sha256:" + h.hexdigest()


def copy(src: Path, dst: Path, exclude: Iterable[str] = (), skip_dirs: Iterable[Path] = ()) -> None:
    """Copy the snapshot part of ``src`` to ``dst`` (which must not exist)."""
    skip = frozenset(p.resolve() for p in skip_dirs)
    wanted = _walk(src, frozenset(exclude), skip)
    with writing(dst):
        dst.mkdir(parents=True)
    for rel in wanted:
        s, d = src / rel.rstrip("/"), dst / rel.rstrip("/")
        with writing(d):  # a full disk names the file it could not write
            if rel.endswith("/"):
                d.mkdir(exist_ok=True)
                continue
            d.parent.mkdir(parents=True, exist_ok=True)
            if s.is_symlink():
                os.symlink(os.readlink(s), d)
            else:
                shutil.copy2(s, d)


# -- kept snapshots: releases/r<N>/ with releases/r<N>.json naming its digest -----------


def kept(releases: Path) -> list[tuple[int, Path]]:
    """The snapshots in a releases directory, newest first."""
    try:
        entries = list(releases.iterdir())
    except OSError:
        return []
    out = []
    for p in entries:
        m = _REVISION_DIR.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out, reverse=True)


def digest_of_kept(path: Path) -> str | None:
    """The digest recorded beside a kept snapshot (None: unknown, so never trusted)."""
    try:
        meta = json.loads(path.with_name(path.name + ".json").read_text())
    except (OSError, ValueError):
        return None
    found = meta.get("digest") if isinstance(meta, dict) else None
    return str(found) if found else None


def remember(path: Path, revision: int, digest: str, source: str | None, created_at: str) -> None:
    """Write the sidecar naming a kept snapshot's digest (and where it was copied from)."""
    doc = {"revision": revision, "digest": digest, "source": source, "created_at": created_at}
    write_json(path.with_name(path.name + ".json"), doc)


def discard(path: Path) -> None:
    """Delete a kept snapshot and its sidecar."""
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        path.with_name(path.name + ".json").unlink()


def find(releases_dirs: Iterable[Path], digest: str) -> Path | None:
    """The newest kept snapshot with ``digest``, searching the directories in order."""
    for releases in releases_dirs:
        for _, path in kept(releases):
            if digest_of_kept(path) == digest:
                return path
    return None


def make(
    dest: Path,
    want: str,
    sources: Iterable[Path],
    exclude: Iterable[str] = (),
    skip_dirs: Iterable[Path] = (),
) -> bool:
    """Copy the first of ``sources`` whose copy has digest ``want`` to ``dest`` (atomically:
    a temporary directory renamed into place). False when none has it."""
    exclude, skip_dirs = list(exclude), list(skip_dirs)
    for src in sources:
        if not src.is_dir():
            continue
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        tmp.rmdir()
        try:
            copy(src, tmp, exclude, skip_dirs)
            if digest(tmp, exclude) == want:
                os.replace(tmp, dest)
                return True
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return False


def prune(releases: Path, keep: int, in_use: Iterable[str]) -> list[str]:
    """Delete all but the newest ``keep`` snapshots, never one named in ``in_use``."""
    busy = set(in_use)
    dropped = []
    for i, (rev, path) in enumerate(kept(releases)):
        if i < keep or path.name in busy:
            continue
        discard(path)
        dropped.append(f"r{rev}")
    return sorted(dropped)
