"""``shipway init`` writes a spec from what the app already has, and it deploys locally as
written — on a Procfile app with a .env, a Python app with requirements.txt, and an empty
directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.backends.local.conftest import Slot, eventually

SERVER = """\
import http.server, os

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        token = "set" if os.environ.get("API_TOKEN") else "unset"
        body = f"{os.environ.get('GREETING')} token={token}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""
WORKER = "import time\nwhile True:\n    time.sleep(1)\n"
TOKEN = "tok-0123456789-value"


def init(slot: Slot, *args: str) -> tuple[int, str]:
    r = slot.run("init", *args)
    return r.code, r.text


def serves(slot: Slot, host: str, expected: str) -> str:
    def answer() -> str | None:
        code, body = slot.get("/", host=host)
        return body if code == 200 and expected in body else None

    return eventually(answer, what=f"{host} answering {expected!r}")


def test_init_on_a_procfile_app_with_a_dotenv_deploys_locally(
    tmp_path: Path, local_app: Callable[[Path], Slot]
) -> None:
    app = tmp_path / "board"
    app.mkdir()
    (app / "Procfile").write_text("web: python3 server.py\nworker: python3 worker.py\n")
    (app / "server.py").write_text(SERVER)
    (app / "worker.py").write_text(WORKER)
    (app / ".env").write_text(f"GREETING=hello from dotenv\nAPI_TOKEN={TOKEN}\n")
    slot = local_app(app)

    code, out = init(slot)
    assert code == 0, out
    spec = slot.spec.read_text()
    assert 'procfile = "Procfile"' in spec and "command =" not in spec  # named, not repeated
    assert 'env_file = ".env"' in spec
    assert 'API_TOKEN = { from_env = "API_TOKEN" }' in spec  # a credential becomes a secret
    assert "a guess" in spec and 'path = "/"' in spec  # the health path, flagged
    assert TOKEN not in spec + out

    assert slot.run("validate").code == 0
    deployed = slot.run("deploy")  # one slot: SLOT may be left out
    assert deployed.code == 0, deployed.text
    assert serves(slot, "board.localhost", "hello from dotenv") == "hello from dotenv token=set"
    assert set(slot.processes()) == {"web", "worker"}
    # the secret read from .env is masked wherever shipway shows or keeps it
    history = slot.run("history", "-o", "json")
    assert TOKEN not in deployed.text + history.text + json.dumps(slot.status())


def test_init_on_a_python_app_with_requirements_deploys_locally(
    tmp_path: Path, local_app: Callable[[Path], Slot]
) -> None:
    app = tmp_path / "notes"
    app.mkdir()
    (app / "app.py").write_text(SERVER)
    # no third-party package: the deploy needs no dependency build to start it
    (app / "requirements.txt").write_text("# the standard library is enough for now\n")
    slot = local_app(app)

    code, out = init(slot)
    assert code == 0, out
    spec = slot.spec.read_text()
    assert 'command = "python3 app.py"' in spec and "guessed: processes.web" in out
    assert "# build: requirements.txt found" in spec
    assert '# build = "pip install -r requirements.txt"' in spec  # a commented key

    deployed = slot.run("deploy")
    assert deployed.code == 0, deployed.text
    assert serves(slot, "notes.localhost", "token=") == "None token=unset"


def test_init_on_an_empty_directory_deploys_a_stand_in(
    tmp_path: Path, local_app: Callable[[Path], Slot]
) -> None:
    app = tmp_path / "empty"
    app.mkdir()
    slot = local_app(app)

    code, out = init(slot)
    assert code == 0, out
    assert "a static file server stands in" in slot.spec.read_text()
    deployed = slot.run("deploy")
    assert deployed.code == 0, deployed.text
    # the stand-in serves the release's own files (its directory listing); the spec is not
    # one of them: a snapshot never holds the spec being deployed
    page = serves(slot, "empty.localhost", "Directory listing")
    assert "shipway.toml" not in page


def test_init_never_overwrites_without_force(
    tmp_path: Path, local_app: Callable[[Path], Slot]
) -> None:
    app = tmp_path / "kept"
    app.mkdir()
    (app / "shipway.toml").write_text("# mine\n")
    slot = local_app(app)

    code, out = init(slot)
    assert code == 2 and "already exists; nothing was written" in out
    assert slot.spec.read_text() == "# mine\n"
    printed = slot.run("init", "--print")
    assert printed.code == 0 and "[processes.web]" in printed.out
    assert slot.spec.read_text() == "# mine\n"
    code, out = init(slot, "--force")
    assert code == 0, out
    assert "[processes.web]" in slot.spec.read_text()
