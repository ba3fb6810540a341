"""Env files on a real local deploy: plain env with the documented precedence, a secret
from a variable the env file sets (masked everywhere), and no env file in any snapshot."""

from __future__ import annotations

import json
from pathlib import Path

from tests.backends.local.conftest import Slot, eventually

SECRET = "dotenv-s3cret-9876"
PRINTER = """\
import os, time
print("greeting", os.environ["GREETING"], "level", os.environ["LOG_LEVEL"], flush=True)
print("token is", os.environ["API_TOKEN"], flush=True)
while True:
    time.sleep(1)
"""


def test_env_files_feed_env_and_secrets_and_never_enter_a_snapshot(hello: Slot) -> None:
    app = hello.app_dir
    (app / "printer.py").write_text(PRINTER)
    (app / ".env").write_text(f"GREETING=from-dotenv\nLOG_LEVEL=debug\nAPI_TOKEN={SECRET}\n")
    (app / ".env.local").write_text("LOG_LEVEL=trace\n")
    (app / "config").mkdir()
    (app / "config" / "prod.env").write_text("NOT_READ=1\n")  # named like one: left out too
    spec = hello.spec.read_text().replace(
        '[app]\nname = "hello"', '[app]\nname = "hello"\nenv_file = [".env", ".env.local"]'
    )
    spec += (
        '\n[processes.printer]\ncommand = "python3 printer.py"\n'
        '[secrets]\nAPI_TOKEN = { from_env = "API_TOKEN" }\n'
        '[slots.local]\nenv = { GREETING = "from-slot" }\n'
    )
    hello.spec.write_text(spec.replace('GREETING = "hello"', 'GREETING = "from-spec"'))

    deployed = hello.deploy()
    # spec env < env files (a later one over an earlier one) < the slot's env
    printed = eventually(
        lambda: (r := hello.run("logs", "printer")).code == 0 and "token is" in r.out and r.out,
        what="the printer's lines",
    )
    assert "greeting from-slot level trace" in printed
    assert "token is ***" in printed  # a secret read from .env is masked like any secret
    outputs = [deployed.text, printed, hello.run("plan").text]
    outputs += [hello.run(*a).text for a in (("history", "-o", "json"), ("status", "-o", "json"))]
    assert not any(SECRET in text for text in outputs)

    snap = hello.state / "hello" / "local" / "releases" / "r1"
    assert (snap / "app.py").exists()
    assert not (snap / ".env").exists() and not (snap / ".env.local").exists()
    assert not (snap / "config" / "prod.env").exists()
    records = json.dumps(hello.history())
    assert SECRET not in records and "from-dotenv" not in records  # .env's GREETING lost


def test_an_env_file_must_be_named_like_one(hello: Slot) -> None:
    (hello.app_dir / "settings.txt").write_text("A=1\n")
    hello.spec.write_text(
        hello.spec.read_text().replace(
            '[app]\nname = "hello"', '[app]\nname = "hello"\nenv_file = "settings.txt"'
        )
    )
    r = hello.run("validate")
    assert r.code == 2
    assert "app.env_file: 'settings.txt' is not named like an env file" in r.err
    assert Path(hello.app_dir / "settings.txt").exists()
