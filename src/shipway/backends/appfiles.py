"""What of an app's directory is the app: the ONE rule every copy of it follows — the local
backend's release snapshot and the Docker build context alike (invariant 12).

Never part of a copy, whatever else is declared:

* version-control directories (``.git``, ``.hg``, ``.svn``, ``.bzr``);
* virtualenvs (``.venv``, or any directory holding a ``pyvenv.cfg``) and ``node_modules``:
  a release builds its own dependency environment, it never ships the developer's;
* caches (``__pycache__``, ``*.pyc``, ``.mypy_cache``, ``.pytest_cache``, ``.ruff_cache``,
  ``.tox``);
* env files wherever they are (``.env``, ``.env.NAME``, ``NAME.env``: they may hold secrets'
  values; ``.env.example`` and the like are documentation, kept), and every file the app's
  ``env_file`` names;
* every file a secret is read from (``secrets.NAME.from_file``) and every state directory
  (the local backend's, when it lies inside the app);
* what ``.shipwayignore`` names, in gitignore syntax (``pathspec``'s own gitignore rules).

What must never happen: a secret value, a virtualenv or a repository copied into a release.
The rule is relative (paths under the app's directory), so the same rule decides for the
source and for a copy of it — a copy is verified by hashing it under the very same rule.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shipway.errors import InputError
from shipway.spec.envfile import is_env_file
from shipway.spec.model import App
from shipway.spec.volumes import DATABASE_SUFFIXES

if TYPE_CHECKING:
    import pathspec

IGNORE_FILE = ".shipwayignore"
SQLITE_HEADER = b"SQLite format 3\0"
NEVER_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".bzr",
        ".venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    }
)
NEVER_SUFFIXES = (".pyc", ".pyo")
#: ``.env.example`` and the like are documentation, not secrets
ENV_SAMPLES = (".example", ".sample", ".template", ".dist")
VENV_MARK = "pyvenv.cfg"


def never(rel: str, is_dir: bool) -> bool:
    """Whether a path (relative, '/'-separated) may never be part of a copy of the app, by
    its name alone."""
    parts = rel.rstrip("/").split("/")
    if any(p in NEVER_DIRS for p in (parts if is_dir else parts[:-1])):
        return True
    name = parts[-1]
    if is_dir:
        return False
    if name.endswith(NEVER_SUFFIXES):
        return True
    return is_env_file(name) and not name.endswith(ENV_SAMPLES)


@dataclass(frozen=True)
class AppFiles:
    """The rule for one app directory: ``excluded`` are relative paths (secret files, state
    directories, and whatever the caller writes itself, such as declared config files);
    ``ignored`` the ``.shipwayignore`` patterns (None: there is no such file); ``outside``
    absolute directories (the state directory) that no symlink of a copy may point into."""

    excluded: frozenset[str]
    ignored: pathspec.GitIgnoreSpec | None
    outside: frozenset[Path] = frozenset()

    @classmethod
    def of(cls, app: App, source: Path | None = None, also: Iterable[Path | str] = ()) -> AppFiles:
        """The rule for ``source`` (default: the app's own directory). ``also``: more paths
        to leave out — absolute (kept only when inside ``source``) or relative to it."""
        root = (source or app.source_dir).resolve()
        secret_files = [Path(ref.from_file) for ref in app.secrets.values() if ref.from_file]
        excluded: set[str] = set()
        outside: set[Path] = set()
        for path in [*secret_files, *app.env_files, *also]:
            p = Path(path)
            if not p.is_absolute():
                excluded.add(p.as_posix().strip("/"))
                continue
            if p in also and p.is_dir():
                outside.add(p.resolve())
            try:
                excluded.add(p.resolve().relative_to(root).as_posix())
            except ValueError:
                continue  # outside the app: nothing of it could be copied
        excluded.discard(".")
        return cls(frozenset(excluded), _ignore_patterns(root), frozenset(outside))

    @classmethod
    def plain(cls, excluded: Iterable[str] = ()) -> AppFiles:
        """The rule with no app behind it: what is never part of one, and ``excluded``."""
        return cls(frozenset(excluded), None)

    def keeps(self, root: Path, rel: str, is_dir: bool) -> bool:
        """Whether ``rel`` (relative to ``root``; a directory's without a trailing '/') is
        part of the app. A directory left out leaves out everything under it."""
        rel = rel.strip("/")
        if never(rel, is_dir) or rel in self.excluded:
            return False
        if self.ignored is not None and self.ignored.match_file(rel + "/" if is_dir else rel):
            return False
        full = root / rel
        if self.outside and full.is_symlink():
            target = Path(os.path.realpath(full))
            if any(target.is_relative_to(d) for d in self.outside):
                return False  # a symlink into the state directory (a placed volume)
        return not (is_dir and (full / VENV_MARK).is_file())

    def select(self, root: Path, paths: Iterable[tuple[str, bool]]) -> list[str]:
        """Of ``paths`` under ``root`` (relative, '/'-separated, each with whether it is a
        directory), those that are the app, in their order; directories end with '/'. A
        path under a directory that is not the app is not either (another tool's walk, such
        as the Docker SDK's ``.dockerignore`` matcher, lists them all)."""
        verdicts: dict[str, bool] = {}

        def kept_dir(d: str) -> bool:
            if d not in verdicts:
                parent = d.rpartition("/")[0]
                verdicts[d] = (not parent or kept_dir(parent)) and self.keeps(root, d, True)
            return verdicts[d]

        out = []
        for rel, is_dir in paths:
            rel = rel.strip("/")
            parent = rel.rpartition("/")[0]
            if parent and not kept_dir(parent):
                continue
            if is_dir and kept_dir(rel):
                out.append(rel + "/")
            elif not is_dir and self.keeps(root, rel, False):
                out.append(rel)
        return out

    def walk(self, root: Path) -> list[str]:
        """Every path under ``root`` that is the app, relative, '/'-separated and sorted;
        directories end with '/'. Symbolic links are listed, never followed."""
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            here = Path(dirpath)
            rel_dir = here.relative_to(root)
            keep_dirs = []
            for d in sorted(dirnames):
                rel = (rel_dir / d).as_posix()
                link = (here / d).is_symlink()
                if not self.keeps(root, rel, is_dir=not link):
                    continue
                if link:
                    out.append(rel)
                    continue
                keep_dirs.append(d)
                out.append(rel + "/")
            dirnames[:] = keep_dirs
            for f in sorted(filenames):
                rel = (rel_dir / f).as_posix()
                if self.keeps(root, rel, is_dir=False):
                    out.append(rel)
        return sorted(out)


def looks_like_database(path: Path) -> bool:
    """Whether a file is a database: named like one (``*.sqlite3``, ``*.sqlite``, ``*.db``)
    or starting with SQLite's header. A symlink or an unreadable file is not."""
    if path.is_symlink() or not path.is_file():
        return False
    if path.name.endswith(DATABASE_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def ignored_by(root: Path) -> pathspec.GitIgnoreSpec | None:
    """What ``root``'s ``.shipwayignore`` names (None: it has none)."""
    return _ignore_patterns(root)


def _ignore_patterns(root: Path) -> pathspec.GitIgnoreSpec | None:
    """The patterns of ``.shipwayignore`` (gitignore syntax); None when there is no file.
    ``pathspec`` is imported only when there is one: most apps have none, and a plan or a
    deploy should not pay for a matcher it does not use."""
    path = root / IGNORE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot be read: {exc} (hint: make it a text file)") from exc
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(text.splitlines())
