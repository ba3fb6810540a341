"""Snapshots: an app's source directory, hashed and copied into the state directory.

The digest is the release's "image digest" on this backend: it names exactly the files a
release runs, so a promotion copies exactly what was tested, and a copy is verified
against it. What is part of a snapshot (and of its digest) is decided by ONE rule,
:class:`~shipway.backends.appfiles.AppFiles` (the Docker build context follows the same):
no version-control, virtualenv, ``node_modules`` or cache directories, no ``.env``, no
secret file, no state directory, nothing ``.shipwayignore`` names — and not the config files
the spec declares (they are written into each snapshot from the spec, with this slot's
secrets).

Each kept snapshot's sidecar (``r<N>.json``) lists the paths it was made with, and those its
release command wrote there (``built``: build output such as ``collectstatic``'s), so what a
release created inside its snapshot at run time can be told apart afterwards.
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
from collections.abc import Callable, Iterable
from pathlib import Path

from shipway.backends.appfiles import AppFiles
from shipway.backends.local.dirs import write_json, writing

_REVISION_DIR = re.compile(r"^r(\d+)$")
PLAIN = AppFiles.plain()  #: only what is never part of an app


def digest(root: Path, rule: AppFiles = PLAIN) -> str:
    """``sha256:<hex>`` over names, types, executable bits and contents."""
    return digest_of_paths(root, rule.walk(root))


def digest_of_paths(root: Path, paths: Iterable[str]) -> str:
    h = hashlib.sha256()
    for rel in paths:
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


def copy(src: Path, dst: Path, rule: AppFiles = PLAIN) -> list[str]:
    """Copy the snapshot part of ``src`` to ``dst`` (which must not exist); the paths copied.
    A file the disk cannot hold fails naming it (WriteFailed)."""
    wanted = rule.walk(src)
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
    return wanted


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


def remember(
    path: Path,
    revision: int,
    digest: str,
    source: str | None,
    created_at: str,
    paths: Iterable[str] | None = None,
) -> None:
    """Write the sidecar naming a kept snapshot's digest, where it was copied from and the
    paths it was made with."""
    doc: dict[str, object] = {
        "revision": revision,
        "digest": digest,
        "source": source,
        "created_at": created_at,
    }
    if paths is not None:
        doc["paths"] = list(paths)
    write_json(path.with_name(path.name + ".json"), doc)


def paths_of_kept(path: Path) -> list[str] | None:
    """The paths a kept snapshot was made with (None: a snapshot made before they were
    recorded, or an unreadable sidecar — so nothing can be told about it)."""
    try:
        meta = json.loads(path.with_name(path.name + ".json").read_text())
    except (OSError, ValueError):
        return None
    paths = meta.get("paths") if isinstance(meta, dict) else None
    return [str(p) for p in paths] if isinstance(paths, list) else None


def remember_built(path: Path) -> None:
    """Add to a kept snapshot's sidecar the files its release command wrote in it: those
    there now that it was not made with (nothing is said of a snapshot made before its
    paths were recorded)."""
    sidecar = path.with_name(path.name + ".json")
    try:
        meta = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return
    made_with = meta.get("paths") if isinstance(meta, dict) else None
    if not isinstance(made_with, list):
        return
    made = set(made_with)
    before = set(meta.get("built") or ())
    meta["built"] = sorted(before | {f for f in files_under(path) if f not in made})
    write_json(sidecar, meta)


def built_of_kept(path: Path) -> list[str]:
    """The files a kept snapshot's release command wrote in it (none recorded: none)."""
    try:
        meta = json.loads(path.with_name(path.name + ".json").read_text())
    except (OSError, ValueError):
        return []
    built = meta.get("built") if isinstance(meta, dict) else None
    return [str(p) for p in built] if isinstance(built, list) else []


def files_under(root: Path) -> list[str]:
    """Every file and symlink under ``root``, relative, sorted (directories are not data)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(root)
        links = [d for d in dirnames if (here / d).is_symlink()]
        dirnames[:] = [d for d in dirnames if d not in links]
        out += [(rel_dir / f).as_posix() for f in [*filenames, *links]]
    return sorted(out)


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
    rule_of: Callable[[Path], AppFiles] = lambda _: PLAIN,
) -> list[str] | None:
    """Copy the first of ``sources`` whose copy has digest ``want`` to ``dest`` (atomically:
    a temporary directory renamed into place), each under its own rule (``rule_of``); the
    paths copied. None when no source has it."""
    for src in sources:
        if not src.is_dir():
            continue
        rule = rule_of(src)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        tmp.rmdir()
        try:
            paths = copy(src, tmp, rule)
            # the copy hashed under the same rule: what it holds, not what the rule says
            if digest_of_paths(tmp, rule.walk(tmp)) == want:
                os.replace(tmp, dest)
                return paths
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return None


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
