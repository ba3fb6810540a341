"""What a release's containers wrote inside themselves while they ran (the data a deploy
loses): the Engine API's container diff (``GET /containers/{id}/changes``, what ``docker
diff`` shows) of each of the release's app containers, on every host.

Only files added or changed under the image's working directory count (the app's own copy;
a working directory of ``/`` leaves out the system's run-time places such as ``/tmp`` and
``/run``); volumes and bind-mounted config files are not in a container's diff at all, and
caches (``__pycache__``) are not data.
"""

from __future__ import annotations

from shipway.backends.appfiles import never
from shipway.backends.docker import labels
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.edge import edge
from shipway.backends.docker.state import DockerState, tags_of
from shipway.release.model import Release
from shipway.spec.model import Target

ADDED, CHANGED = 1, 0  # the diff's Kind values (2: deleted)
#: under a working directory of "/": where a system writes at run time, not the app
SYSTEM = ("tmp", "var", "run", "dev", "proc", "sys", "etc", "root")


class DockerRuntimeFiles(DockerState):
    """runtime_files."""

    def runtime_files(self, target: Target, release: Release) -> list[str] | None:
        self._serves(target)
        workdir = ((release.image_meta.working_dir if release.image_meta else None) or "/").rstrip(
            "/"
        )
        hosts = {str(u.host) for u in release.artifact if u.kind == "container" and u.host}

        def written(conn: HostConnection) -> list[str]:
            found: list[str] = []
            with edge(f"host {conn.name}: reading what r{release.revision}'s containers wrote"):
                for c in self._labelled(conn.client(), labels.APP_CONTAINER, sparse=True):
                    if tags_of(c).get(labels.RELEASE) != str(release.revision):
                        continue
                    changes = c.diff() or []
                    paths = [
                        str(ch["Path"]) for ch in changes if ch.get("Kind") in (ADDED, CHANGED)
                    ]
                    found += _app_files(paths, workdir)
            return found

        # every host at once, as the observation reads them (the first error is raised); a
        # host the slot no longer lists is not read: this deploy does not touch it
        on_hosts = self._each_host(written, only=hosts)
        return sorted({path for paths in on_hosts.values() for path in paths})


def _app_files(paths: list[str], workdir: str) -> list[str]:
    """The files among ``paths`` (absolute) under ``workdir``, relative to it; a directory
    listed because something under it changed is not a file of its own."""
    below = workdir + "/"
    out = []
    for path in paths:
        if any(other.startswith(path + "/") for other in paths):
            continue  # a directory whose content changed
        if workdir and not path.startswith(below):
            continue
        rel = path[len(below) :] if workdir else path.lstrip("/")
        if not workdir and rel.split("/", 1)[0] in SYSTEM:
            continue
        if rel and not never(rel, is_dir=False):
            out.append(rel)
    return out
