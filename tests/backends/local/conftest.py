"""Fixtures for the local backend's tests: real processes, real HTTP on loopback.

Each test gets its own state directory, its own free router port and its own copy of the
hello example; its supervisord (and everything it supervises) is shut down at teardown.
Tests wait on conditions (``eventually``), never on bare sleeps.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from shipway.backends.local.supervisor import Supervisor
from tests import cliproc
from tests.testenv import ports

REPO = Path(__file__).resolve().parents[3]
HELLO = REPO / "examples" / "hello"
T = TypeVar("T")


def free_port() -> int:
    """A router port of this test's own (tests.testenv.ports: a band per xdist worker)."""
    return ports.free_port("127.0.0.1")


def children(pid: int) -> list[int]:
    """The processes ``pid`` started that still have it as their parent."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def eventually(check: Callable[[], T], timeout: float = 20.0, what: str = "condition") -> T:
    """Poll ``check`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # a probe that cannot answer yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


def blog_serving_hello(app_dir: Path, drop: str = "") -> Path:
    """A copy of the hello app named "blog" (greeting "blog") that serves hello.localhost,
    beside ``app_dir`` (``drop``: spec text to leave out of the copy); its spec file."""
    blog = app_dir.parent / "blog"
    shutil.copytree(app_dir, blog)
    spec = blog / "shipway.toml"
    text = spec.read_text().replace('name = "hello"', 'name = "blog"')
    text = text.replace('GREETING = "hello"', 'GREETING = "blog"')
    text = text.replace(drop, "") if drop else text
    spec.write_text(text + '\n[[routes]]\nhost = "hello.localhost"\nprocess = "web"\n')
    return spec


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


@dataclass
class Slot:
    """One app copy, one state dir, one router port: everything a test touches."""

    app_dir: Path
    state: Path
    port: int
    env: dict[str, str]
    spawned: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def spec(self) -> Path:
        return self.app_dir / "shipway.toml"

    def argv(self, *args: str, spec: Path | None = None) -> list[str]:
        return [sys.executable, "-m", "shipway", "-f", str(spec or self.spec), *args]

    def run(self, *args: str, spec: Path | None = None, timeout: float = 120) -> Result:
        p = cliproc.run(
            self.argv(*args, spec=spec),
            env=self.env,
            cwd=self.app_dir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(p.returncode, p.stdout, p.stderr)

    def spawn(self, *args: str, spec: Path | None = None) -> subprocess.Popen[str]:
        p = cliproc.ShipwayProcess(
            self.argv(*args, spec=spec),
            env=self.env,
            cwd=self.app_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.spawned.append(p)
        return p

    def deploy(self, *extra: str, expect: int = 0, spec: Path | None = None) -> Result:
        r = self.run("deploy", "local", *extra, spec=spec)
        assert r.code == expect, f"deploy exited {r.code}, expected {expect}:\n{r.text}"
        return r

    def get(self, path: str = "/", host: str = "hello.localhost") -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", path, headers={"Host": host})
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def json(self, *args: str) -> Any:
        r = self.run(*args, "-o", "json")
        assert r.code == 0, r.text
        return json.loads(r.out)

    def status(self) -> dict[str, Any]:
        return dict(self.json("status", "local"))

    def processes(self) -> dict[str, dict[str, Any]]:
        """process -> status row, for the live (deployed) release's programs."""
        rows = self.status()["processes"]
        return {r["process"]: r for r in rows}

    def history(self) -> list[dict[str, Any]]:
        return list(self.json("history", "local")["releases"])

    def supervisor(self) -> Supervisor:
        return Supervisor(self.state / "supervisor")

    def programs(self) -> list[str]:
        """Names of the app programs supervisord runs (routers left out)."""
        return [n for n in self.supervisor().names() if n.startswith("sw.")]

    def close(self) -> None:
        """Kill what the test spawned; shut its supervisord (and all it supervises) down."""
        for p in self.spawned:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)
            if p.stdout:
                p.stdout.close()
        self.supervisor().shutdown()

    def edit_spec(self, old: str, new: str, spec: Path | None = None) -> None:
        path = spec or self.spec
        text = path.read_text()
        assert old in text, f"{old!r} not in {path}"
        path.write_text(text.replace(old, new))


def slot_of(app_dir: Path, state: Path, *, drop: tuple[str, ...] = (), **env: str) -> Slot:
    """A slot for the app in ``app_dir``: its own state dir and router port, this process's
    environment without shipway's variables (nor those starting with ``drop``), plus
    ``env``. Its programs take their ports from this worker's span (tests.testenv.ports), as
    every other shipway the tests start does: the default span is every worker's."""
    port = free_port()
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SHIPWAY_", "XDG_STATE", *drop))
    }
    environ.update(
        SHIPWAY_STATE_DIR=str(state),
        SHIPWAY_ROUTER_PORT=str(port),
        SHIPWAY_LOCAL_PORTS=ports.program_ports(),
        PYTHONUNBUFFERED="1",
    )
    environ.update(env)  # a test's own values over these (SHIPWAY_LOCAL_PORTS among them)
    return Slot(app_dir=app_dir, state=state, port=port, env=environ)


#: a PATH that holds no app dependency (no gunicorn, no Django, no Flask)
BARE_PATH = "/usr/bin:/bin"


def built_slot(app_dir: Path, state: Path, wheels: Path, **env: str) -> Slot:
    """A slot whose deploys build the app's environment from the wheel directory ``wheels``
    only (``PIP_FIND_LINKS``, no index), from a shell with no virtualenv activated and a
    PATH that holds no app dependency — so whatever the app runs comes from the build;
    ``env`` is set over that (a PATH or VIRTUAL_ENV of its own, say)."""
    base = {"PATH": BARE_PATH, "PIP_FIND_LINKS": str(wheels), "PIP_NO_INDEX": "1"}
    return slot_of(app_dir, state, drop=("VIRTUAL_ENV", "PIP_"), **{**base, **env})


def builds(slot: Slot) -> list[dict[str, Any]]:
    """The build of each release of the slot, oldest first (None: nothing was built)."""
    return [r["build"] for r in slot.history()]


def env_identity(path: str) -> tuple[int, int]:
    """What changes when an environment's directory is made or installed into again."""
    return os.stat(path).st_ino, os.stat(Path(path) / "bin").st_mtime_ns


def web_environ(slot: Slot) -> dict[str, str]:
    """The environment of the live web process (from /proc)."""
    pid = eventually(lambda: slot.processes()["web"]["pid"], what="web's pid")
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


@pytest.fixture
def slot(tmp_path: Path) -> Iterator[Slot]:
    app_dir = tmp_path / "hello"
    shutil.copytree(HELLO, app_dir, ignore=shutil.ignore_patterns("__pycache__"))
    s = slot_of(app_dir, tmp_path / "state")
    try:
        yield s
    finally:
        s.close()


# notes: a small app whose health check reads the SQLite schema its release command makes
# (the release phase, one-off runs and runtime files are tested on it)
NOTES_APP = '''\
"""notes: a tiny app whose health check reads its SQLite database."""
import http.server
import os
import sqlite3

DB = os.environ.get("NOTES_DB", "notes.db")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        try:
            with sqlite3.connect(DB) as db:
                count = db.execute("SELECT count(*) FROM notes").fetchone()[0]
            code, body = 200, f"notes: {count}\\n"
        except sqlite3.Error as exc:
            code, body = 500, f"database not ready: {exc}\\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''

MIGRATE = '''\
import os
import sqlite3
import sys

if os.environ.get("MIGRATE_FAIL"):
    print("migration refused: MIGRATE_FAIL is set")
    sys.exit(4)
with sqlite3.connect(os.environ.get("NOTES_DB", "notes.db")) as db:
    db.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT)")
    db.execute("INSERT INTO notes (text) VALUES ('first')")
print("migrated", os.environ["SHIPWAY_RELEASE"])
'''

SPEC = """\
[app]
name = "notes"
release_command = "python3 migrate.py"

[processes.web]
command = "python3 app.py"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 50

[env]
GREETING = "hi"

[secrets]
DB_PASSWORD = { from_file = "secrets/db-password" }
API_TOKEN = { from_env = "NOTES_API_TOKEN" }

[files]
"config/db.ini" = "password=${secrets.DB_PASSWORD}\\n"
"config/plain.ini" = "colour=blue\\n"

[slots.local]

[slots.prod]
role = "production"
"""

DB_PASSWORD = "pw-5d41402abc4b2a76"
API_TOKEN = "tok-7e240de74fb1ed08"


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[Slot]:
    app_dir = tmp_path / "notes"
    files = {
        "app.py": NOTES_APP,
        "migrate.py": MIGRATE,
        "shipway.toml": SPEC,
        "secrets/db-password": DB_PASSWORD + "\n",
        ".env": f"API_TOKEN={API_TOKEN}\n",
        ".env.example": "API_TOKEN=\n",
        ".git/HEAD": "ref: refs/heads/main\n",
        "venv/pyvenv.cfg": "home = /usr/bin\n",
        "node_modules/left-pad/index.js": "module.exports = 1\n",
        "drafts/todo.txt": "not for production\n",
        ".shipwayignore": "drafts/\n",
    }
    for rel, text in files.items():
        (app_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (app_dir / rel).write_text(text)
    s = slot_of(app_dir, tmp_path / "state", NOTES_API_TOKEN=API_TOKEN)
    try:
        yield s
    finally:
        s.supervisor().shutdown()


def releases(slot: Slot, name: str = "local") -> Path:
    return slot.state / "notes" / name / "releases"


# the browser tests' fixtures (Chromium, screenshots), for every module here
from tests.backends.local.browser import artifacts, browser, chromium  # noqa: E402, F401
