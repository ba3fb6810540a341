"""What a local release's dependency environment is made from, and what it gives the
processes that run with it. No subprocess runs here (``plan`` calls it).

Detection, in the app's directory (a kept snapshot's, for a promotion):

* ``[app] build = "..."``: that command, run in the app's directory with ``SHIPWAY_ENV``
  naming the environment's directory to fill; its ``bin/`` goes first on ``PATH``. Its
  inputs are the whole source (a command may read any file) and the command;
* ``requirements.txt`` (and the files it includes with ``-r``/``-c``), else a
  ``pyproject.toml`` with ``[project] dependencies``: a Python virtualenv with them
  installed (the app itself runs from its snapshot, as always). Of a ``pyproject.toml``
  only that list counts: its version or other tables change no environment;
* ``package.json`` with ``package-lock.json`` or ``npm-shrinkwrap.json``: ``npm ci`` into
  the environment's ``node_modules``;
* nothing of these, or ``[app] build = false``: no environment.

The environment's id hashes the dependency files (names and bytes), the interpreter's
identity (its version and resolved path for shipway's own; the resolved path, size and
modification time for another, so an upgraded interpreter gives a new id without running
it) and the recipe: the same inputs always find the same directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shipway.errors import InputError
from shipway.spec.model import App

RecipeKind = Literal["python", "node", "command"]
MARKER = ".shipway-env.json"  #: written last: an environment without it is incomplete
LOCKFILES = ("package-lock.json", "npm-shrinkwrap.json")
RECIPE_VERSION = "1"  #: bumped when the way an environment is made changes


@dataclass(frozen=True)
class Recipe:
    """How one environment is made, and from what."""

    kind: RecipeKind
    source: str  #: what it is made from, as the plan says it
    files: tuple[str, ...] = ()  #: the dependency files, relative to the app's directory
    command: tuple[str, ...] = ()  #: the build command (kind ``command``)
    python: str | None = None  #: the interpreter (kind ``python``)
    python_identity: str = ""
    packages: tuple[str, ...] = ()  #: pyproject.toml's [project] dependencies

    def id(self, root: Path, source_digest: str = "") -> str:
        """``<kind>-<16 hex>``: the content address of the environment (its directory)."""
        prefix = {"python": "py", "node": "node", "command": "cmd"}[self.kind]
        return f"{prefix}-{self.digest(root, source_digest)[7:23]}"

    def digest(self, root: Path, source_digest: str = "") -> str:
        """``sha256:<hex>`` of everything the environment is made from."""
        h = hashlib.sha256(f"{RECIPE_VERSION}\0{self.kind}\0".encode())
        for name in self.files:
            h.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
        recipe = [list(self.command), self.python_identity, list(self.packages)]
        h.update(json.dumps(recipe).encode())
        if self.kind == "command":
            h.update(source_digest.encode())
        return "sha256:" + h.hexdigest()


def interpreter(app: App) -> tuple[str, str]:
    """(path, identity) of the Python the environment is made with: ``[build] python`` (a
    version, found on PATH as ``python<version>``, or a path), else shipway's own."""
    wanted = app.build.python
    if wanted is None:
        base = getattr(sys, "_base_executable", sys.executable) or sys.executable
        path = os.path.realpath(base)
        return sys.executable, f"{path}:{sys.version}"
    if "/" in wanted:
        found = Path(wanted) if Path(wanted).is_absolute() else app.source_dir / wanted
        if not os.access(found, os.X_OK):
            raise InputError(f"build.python {wanted!r}: {found} is not an executable")
        path = str(found)
    else:
        which = shutil.which(f"python{wanted}")
        if which is None:
            raise InputError(
                f"build.python {wanted!r}: no python{wanted} on PATH (hint: install it, give its "
                'path (python = "/usr/bin/python3.11"), or drop the key to use shipway\'s own)'
            )
        path = which
    real = os.path.realpath(path)
    st = os.stat(real)
    return path, f"{real}:{st.st_size}:{int(st.st_mtime)}"


def _included(root: Path, name: str, seen: set[str]) -> list[str]:
    """``name`` and the requirement files it includes (``-r``/``-c``), relative to root."""
    if name in seen or not (root / name).is_file():
        return []
    seen.add(name)
    out = [name]
    for line in (root / name).read_text(errors="replace").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("-r", "-c", "--requirement", "--constraint"):
            nested = (Path(name).parent / words[1]).as_posix()
            out += _included(root, nested, seen)
    return out


def recipe_of(app: App, root: Path) -> Recipe | None:
    """What the app in ``root`` needs built, or None."""
    settings = app.build
    if not settings.enabled:
        return None
    if settings.command:
        return Recipe("command", f"the build command: {' '.join(settings.command)}",
                      command=settings.command)  # fmt: skip
    if (root / "requirements.txt").is_file():
        python, identity = interpreter(app)
        files = tuple(_included(root, "requirements.txt", set()))
        return Recipe("python", "requirements.txt (pip)", files, (), python, identity)
    if (root / "pyproject.toml").is_file():
        try:
            doc = tomllib.loads((root / "pyproject.toml").read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{root / 'pyproject.toml'}: not valid TOML: {exc}") from exc
        deps = (doc.get("project") or {}).get("dependencies") or []
        if isinstance(deps, list) and deps and all(isinstance(d, str) for d in deps):
            python, identity = interpreter(app)
            # its inputs are the dependencies it lists, never the whole file: a version bump
            # or a tool's settings there build nothing new
            return Recipe("python", "pyproject.toml dependencies (pip)", (), (), python,
                          identity, tuple(deps))  # fmt: skip
        return None
    lock = next((n for n in LOCKFILES if (root / n).is_file()), None)
    if (root / "package.json").is_file() and lock is not None:
        return Recipe("node", f"package.json + {lock} (npm ci)", ("package.json", lock))
    return None


def variables(path: Path, inherited_path: str) -> dict[str, str]:
    """What a process of a release with the environment at ``path`` gets: its executables
    first on ``PATH`` — whatever the deploying shell had activated — and ``VIRTUAL_ENV``
    (Python) or ``NODE_PATH`` (Node). The environment says what it is in its marker."""
    try:
        kind = json.loads((path / MARKER).read_text()).get("kind")
    except (OSError, ValueError):
        kind = None
    rest = [p for p in inherited_path.split(os.pathsep) if p]
    if kind == "node":
        bin_dir = path / "node_modules" / ".bin"
        extra = {"NODE_PATH": str(path / "node_modules")}
    elif kind == "python":
        bin_dir = path / "bin"
        extra = {"VIRTUAL_ENV": str(path)}
    else:
        bin_dir = path / "bin"
        extra = {}
    return {"PATH": os.pathsep.join([str(bin_dir), *rest]), "SHIPWAY_ENV": str(path), **extra}
