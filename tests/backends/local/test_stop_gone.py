"""An app whose directory (and spec) is gone can still be stopped: by name, from its own
records (``shipway stop SLOT --app NAME``); without a spec, ``stop`` says so."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests import cliproc
from tests.backends.local.conftest import Slot


def test_an_app_whose_directory_is_gone_is_stopped_by_name(slot: Slot, tmp_path: Path) -> None:
    slot.deploy()
    assert slot.get("/")[0] == 200
    shutil.rmtree(slot.app_dir)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return cliproc.run(
            [sys.executable, "-m", "shipway", *args],
            env=slot.env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    r = run("-f", str(slot.app_dir), "stop", "local")
    assert r.returncode == 2 and "stop SLOT --app NAME" in r.stderr, r.stderr
    r = run("stop", "local", "--app", "hello")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopped hello/local" in r.stdout
    listed = run("ls")
    assert "hello  local  stopped" in listed.stdout, listed.stdout
    r = run("stop", "local", "--app", "nope")
    assert r.returncode == 2 and "no app 'nope' with a local slot 'local'" in r.stderr
