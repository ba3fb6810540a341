"""The build context of an image: the app's files, exactly, as one deterministic tar.

What goes in: the files under the context directory that ``.dockerignore`` does not exclude
(the Docker SDK's own pattern matcher, so the rules are Docker's) and that are the app by
the one rule every copy of an app follows (:class:`~shipway.backends.appfiles.AppFiles`,
the local snapshot's too). So never, whatever ``.dockerignore`` says (invariant 12): a
secret file the spec refers to, ``.env`` files, version-control directories, virtualenvs
(``.venv``, or any directory holding a ``pyvenv.cfg``), ``node_modules``, caches, nor what
``.shipwayignore`` names; nor the spec (``shipway.toml``, ``shipway.yaml``, the file ``-f``
names): it says how to deploy the image, it is not what the image is built from.

The tar is deterministic — names sorted, owners and times fixed, only the executable bit of
a mode kept — so its sha256, with the Dockerfile's path and the build args, is the content
digest of the build's inputs: the same source always gives the same digest (and so the same
content-addressed tag), and any change to a file that goes in gives another.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from shipway.backends.appfiles import AppFiles
from shipway.errors import InputError
from shipway.spec.load import CANDIDATES as SPEC_NAMES
from shipway.spec.model import App

MTIME = 315532800  # 1980-01-01, as reproducible builds use: a fixed time, not the file's


@dataclass(frozen=True)
class BuildContext:
    """The files of one build, and what the Dockerfile is called inside them."""

    root: Path
    dockerfile: str  #: relative to ``root``
    paths: tuple[str, ...]  #: relative, '/'-separated, sorted; directories end with '/'
    args: Mapping[str, str]

    @classmethod
    def of(cls, app: App) -> BuildContext:
        """The context of ``app``'s image build, or an InputError naming what is missing."""
        from docker.utils.build import exclude_paths

        settings = app.build
        base = app.source_dir.resolve()
        root = (base / settings.context).resolve()
        dockerfile = (base / settings.dockerfile).resolve()
        if not root.is_dir():
            raise InputError(
                f"build.context {settings.context!r}: no such directory in {base} "
                '(hint: build.context = "." builds the app\'s own directory)'
            )
        if not dockerfile.is_file():
            raise InputError(
                f"build.dockerfile {settings.dockerfile!r}: no such file in {base} (hint: add "
                'a Dockerfile, or set [build] dockerfile = "path/to/Dockerfile")'
            )
        try:
            inside = dockerfile.relative_to(root).as_posix()
        except ValueError:
            raise InputError(
                f"build.dockerfile {settings.dockerfile!r} is outside build.context "
                f"{settings.context!r} (hint: move it into the context directory)"
            ) from None
        patterns = _dockerignore(root)
        candidates = []
        for rel in exclude_paths(str(root), patterns, dockerfile=inside):
            full = root / rel
            candidates.append((rel, full.is_dir() and not full.is_symlink()))
        kept = AppFiles.of(app, root, also=spec_files(app)).select(root, candidates)
        return cls(root, inside, tuple(sorted(kept)), dict(settings.args))

    def write_tar(self, out: IO[bytes]) -> None:
        """The deterministic tar of the context, streamed to ``out``."""
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for rel in self.paths:
                full = self.root / rel.rstrip("/")
                st = full.lstat()
                info = tarfile.TarInfo(rel.rstrip("/"))
                info.mtime = MTIME
                info.mode = 0o755 if st.st_mode & 0o111 or stat.S_ISDIR(st.st_mode) else 0o644
                if stat.S_ISLNK(st.st_mode):
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(full), 0o777
                    tar.addfile(info)
                elif stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif stat.S_ISREG(st.st_mode):
                    info.size = st.st_size
                    with full.open("rb") as f:
                        tar.addfile(info, f)

    def digest(self) -> str:
        """``sha256:<hex>`` of the context's tar, the Dockerfile's name and the build args."""
        sink = _Sha256()
        self.write_tar(sink)  # type: ignore[arg-type]
        sink.update(b"\0" + self.dockerfile.encode() + b"\0")
        sink.update(json.dumps(dict(sorted(self.args.items()))).encode())
        return "sha256:" + sink.hexdigest()

    def files(self) -> Iterator[str]:
        return (p for p in self.paths if not p.endswith("/"))


def spec_files(app: App) -> list[Path]:
    """The spec itself (the file ``-f`` named, and any ``shipway.toml`` / ``shipway.yaml``
    / ``shipway.yml`` beside it): what to deploy, not what the image is built from — so
    editing it alone neither changes the build's inputs nor rebuilds the image."""
    base = app.source_dir.resolve()
    return [app.spec_file.resolve(), *(base / name for name in SPEC_NAMES)]


class _Sha256:
    """A write-only file that hashes what is written to it."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self._h.update(data)
        return len(data)

    def update(self, data: bytes) -> None:
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _dockerignore(root: Path) -> list[str]:
    """The patterns of ``.dockerignore``, read as the Docker SDK reads them."""
    try:
        text = (root / ".dockerignore").read_text()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{root / '.dockerignore'}: cannot be read: {exc}") from exc
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]
