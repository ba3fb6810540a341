"""What a release wrote inside its own snapshot while it ran (the data a deploy loses).

A snapshot's sidecar lists the paths it was made with (:mod:`.snapshot`); whatever else is
in it now was written there at run time — except the config files shipway wrote from the
spec, caches (``__pycache__``), what lies under a declared volume, and what its release
command wrote (build output: ``collectstatic``'s files are made again by the next release's)
unless it is a database (a SQLite file its migrations made holds data). A snapshot made
before paths were recorded cannot tell (None).
"""

from __future__ import annotations

from shipway.backends.appfiles import looks_like_database, never
from shipway.backends.local import snapshot
from shipway.backends.local.render import SnapshotBody
from shipway.backends.local.state import LocalState
from shipway.errors import BackendError
from shipway.release.model import Release
from shipway.spec.model import Target


class LocalRuntimeFiles(LocalState):
    """runtime_files."""

    def runtime_files(self, target: Target, release: Release) -> list[str] | None:
        d = self.dirs(target)
        try:
            path = (
                self._generation_snapshot(d, release.generation)
                if release.generation
                else self._snapshot_dir(d, release.digest or "")
            )
        except BackendError:
            return None  # its snapshot is gone: nothing of it can be lost any more
        made_with = snapshot.paths_of_kept(path)
        if made_with is None:
            return None
        known = set(made_with)
        built = set(snapshot.built_of_kept(path))
        written = {f.path for u in release.artifact if u.kind == "snapshot"
                   for f in SnapshotBody.of(u).files}  # fmt: skip
        volumes = _volume_paths(release)
        out = []
        for rel in snapshot.files_under(path):
            if rel in known or rel in written or never(rel, is_dir=False):
                continue
            if rel in built and not looks_like_database(path / rel):
                continue
            if any(rel == v or rel.startswith(v + "/") for v in volumes):
                continue
            out.append(rel)
        return out


def _volume_paths(release: Release) -> list[str]:
    """The relative paths the release's spec places volumes at (their data is kept)."""
    volumes = release.spec.get("volumes") or {}
    paths = []
    if isinstance(volumes, dict):
        for decl in volumes.values():
            path = decl.get("path") if isinstance(decl, dict) else None
            if isinstance(path, str) and not path.startswith("/"):
                paths.append(path.strip("/").removeprefix("./"))
    return paths
