"""The README's first command block, as a newcomer runs it: extracted from README.md, run by
bash in a copy of the project with this machine's own Python (``/usr/bin/python3`` — Debian
12's, which refuses ``pip install`` into itself: PEP 668) and nothing else on ``PATH``. The
example it deploys must then answer through the router."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.backends.local.conftest import eventually, slot_of

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")


def first_block() -> str:
    text = (REPO / "README.md").read_text()
    setup = text.split("\n## Set up\n", 1)[1]
    found = re.search(r"```sh\n(.*?)```", setup, re.S)
    assert found, "README.md's Set up section has no sh block"
    return found.group(1)


@pytest.mark.timeout(900)
def test_the_readmes_first_commands_work_with_the_system_python(tmp_path: Path) -> None:
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no system /usr/bin/python3")
    managed = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    externally_managed = (Path(managed) / "EXTERNALLY-MANAGED").exists()
    copy = tmp_path / "shipway"
    copy.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, copy / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".venv")
    shutil.copytree(REPO / "src", copy / "src", ignore=ignore)
    shutil.copytree(REPO / "examples" / "hello", copy / "examples" / "hello", ignore=ignore)
    # no virtualenv of the test run, no shipway: the system's PATH, its python3 first
    slot = slot_of(copy / "examples" / "hello", tmp_path / "state", drop=("VIRTUAL_ENV", "PIP_"))
    slot.env["PATH"] = "/usr/bin:/bin"
    try:
        r = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", first_block()],
            cwd=copy, env=slot.env, capture_output=True, text=True, timeout=840,
        )  # fmt: skip
        assert r.returncode == 0, (externally_managed, r.stdout[-3000:], r.stderr[-3000:])
        assert "serving http://hello.localhost:" in r.stdout, r.stdout

        def answer() -> str | None:
            code, body = slot.get("/")
            return body if code == 200 else None

        assert "hello from r1" in eventually(answer, what="hello answering")
    finally:
        slot.close()
