"""Benchmark of the local backend's build phase on examples/notes (Flask + gunicorn).

Measures, on a private copy with its own state dir and router port:
  1. the first deploy: a cold dependency install (a new virtualenv, pip with an empty
     cache) — the wall time of ``shipway deploy``;
  2. redeploys with unchanged dependencies (the environment is reused), median;
  3. redeploys of the same app with ``[app] build = false`` and its commands pointing at
     that environment's executables by path: the same work, no build phase, median.
  Goal: (2) - (3) < 0.5 s. Also (4): the build phase alone (``shipway build``: inputs
  hashed, the environment found), in-process, median.

Packages come from the test wheelhouse (``PIP_FIND_LINKS``, no index) unless ``--pypi``.

Run:  .venv/bin/python bench/local_build.py [--runs 5] [--pypi] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from tests.testenv.wheelhouse import ensure_wheels  # noqa: E402

from shipway import api  # noqa: E402
from shipway.backends.local.supervisor import Supervisor  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deploy(app: Path, env: dict[str, str]) -> float:
    t0 = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "shipway", "-f", str(app), "deploy", "local"],
        env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pypi", action="store_true", help="install from PyPI, not the wheelhouse")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="shipway-local-build-bench-"))
    app = work / "notes"
    shutil.copytree(REPO / "examples" / "notes", app)
    state = work / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHIPWAY_", "VIRTUAL_ENV"))}
    env.update(
        SHIPWAY_STATE_DIR=str(state),
        SHIPWAY_ROUTER_PORT=str(free_port()),
        PIP_CACHE_DIR=str(work / "pip-cache"),  # cold: an empty cache
        PATH="/usr/bin:/bin",
    )
    if not args.pypi:
        env.update(PIP_FIND_LINKS=str(ensure_wheels()), PIP_NO_INDEX="1")
    spec = app / "shipway.toml"
    with_build = spec.read_text()
    try:
        cold = deploy(app, env)
        reused = []
        for _ in range(args.runs):
            reused.append(deploy(app, env))
        os.environ.update({k: v for k, v in env.items() if k.startswith("SHIPWAY_")})
        record = api.history(api.load(spec), "local")[-1]
        assert record.build is not None and record.build.reused, record.build
        env_dir = record.build.what
        phase = []
        for _ in range(args.runs):
            t0 = time.monotonic()
            built = api.build(api.load(spec), "local")
            phase.append(time.monotonic() - t0)
            assert built.reused
        bin_dir = f"{env_dir}/bin"
        spec.write_text(
            with_build.replace('release_command = "python3 migrate.py"',
                               f'release_command = "{bin_dir}/python migrate.py"\nbuild = false')
            .replace('command = "gunicorn app:app"', f'command = "{bin_dir}/gunicorn app:app"')
            .replace('command = "python3 worker.py"', f'command = "{bin_dir}/python worker.py"')
        )  # fmt: skip
        plain = [deploy(app, env) for _ in range(args.runs)]
    finally:
        Supervisor(state / "supervisor").shutdown()
        shutil.rmtree(work, ignore_errors=True)
    added = statistics.median(reused) - statistics.median(plain)
    result = {
        "packages_from": "PyPI" if args.pypi else "the test wheelhouse (PIP_FIND_LINKS)",
        "first_deploy_cold_install_s": round(cold, 2),
        "redeploy_unchanged_deps_median_s": round(statistics.median(reused), 2),
        "redeploy_without_build_phase_median_s": round(statistics.median(plain), 2),
        "added_by_reusing_the_environment_s": round(added, 2),
        "goal_added_below_s": 0.5,
        "build_phase_alone_median_s": round(statistics.median(phase), 3),
        "runs": args.runs,
        "load_average": round(os.getloadavg()[0], 2),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if added < 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
