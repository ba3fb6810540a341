"""pytest plugin: the Python packages the build tests install, downloaded once and served.

The example app (``examples/notes``) needs Flask and gunicorn. A Docker build on the test
hosts has no route to a package index (the machine reaches PyPI, its containers do not), so
the wheels are downloaded here once (``pip download``, into
``${SHIPWAY_CACHE:-/var/cache/shipway}/wheels/<hash of the requirements>/``, kept between
runs) and served over HTTP on host A's bridge address, where a build's ``RUN pip install``
reaches them as ``PIP_FIND_LINKS`` with ``PIP_NO_INDEX=1``. The local backend's tests use the
same directory (``PIP_FIND_LINKS`` on this machine), so a run installs from PyPI at most once.

Fixtures: ``wheelhouse`` (session): a :class:`Wheelhouse` with ``dir`` and, once
``serve(address)`` was called, ``url``.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "examples" / "notes" / "requirements.txt"
CACHE = Path(os.environ.get("SHIPWAY_CACHE", "/var/cache/shipway"))


@dataclass
class Wheelhouse:
    """Wheels of the example's requirements (and of what they need)."""

    __test__ = False

    dir: Path
    url: str = ""
    _servers: list[http.server.ThreadingHTTPServer] = field(default_factory=list)

    def serve(self, address: str) -> str:
        """Serve the wheels on ``address`` (a port of its own); the find-links URL."""
        if self.url:
            return self.url
        handler = functools.partial(_Quiet, directory=str(self.dir))
        server = http.server.ThreadingHTTPServer((address, 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._servers.append(server)
        self.url = f"http://{address}:{server.server_address[1]}/"
        return self.url

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def ensure_wheels(requirements: Path = REQUIREMENTS) -> Path:
    """The wheel directory for ``requirements``: downloaded once, atomically."""
    key = hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()[:16]
    target = CACHE / "wheels" / key
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # pytest-xdist's workers each run the session fixture: one downloads, the others wait
    with FileLock(target.parent / f"{key}.lock"):
        if (target / ".complete").exists():
            return target
        return _download(requirements, target)


def _download(requirements: Path, target: Path) -> Path:
    key = target.name
    tmp = target.with_name(f"{key}.tmp-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
         "-d", str(tmp), "-r", str(requirements)],
        check=True,
    )  # fmt: skip
    (tmp / ".complete").write_text("ok\n")
    if target.exists():  # another session made it meanwhile
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    else:
        os.replace(tmp, target)
    return target


@pytest.fixture(scope="session")
def wheelhouse() -> Iterator[Wheelhouse]:
    house = Wheelhouse(ensure_wheels())
    yield house
    house.close()
