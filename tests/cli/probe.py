"""A ``shipway`` command run in a fresh interpreter, as a user runs it, and every module it
loaded: what the tests of a command's imports assert on (``test_command_imports.py``, and
the Docker and Kubernetes backends' start-up tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: runs the command line in-process, then reports its exit code and every module loaded
PROBE = """
import json, sys
from shipway.cli.main import main
sys.argv = ["shipway", *json.loads(sys.argv[1])]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"exit": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


@dataclass(frozen=True)
class Loaded:
    exit: int
    stdout: str
    stderr: str
    modules: list[str]


def run_loaded(args: Sequence[str], env: Mapping[str, str], cwd: Path | None = None) -> Loaded:
    """``shipway ARGS`` run by :data:`PROBE` in a fresh interpreter."""
    p = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    report = json.loads(p.stderr.strip().splitlines()[-1])
    return Loaded(report["exit"], p.stdout, p.stderr, report["modules"])
