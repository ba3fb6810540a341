"""Cold start of the command line: `shipway --help`, median of several runs.

Goal: <= 150 ms on the project's machines (2 cores). Also prints `python -c pass` as the
floor, measured in the same run, so the ratio says what shipway itself adds.

    python bench/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import user_environ


def measure(cmd: list[str], runs: int, env: dict[str, str]) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env
        )
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--no-bytecode", action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE (every start compiles shipway again)",
    )  # fmt: skip
    args = parser.parse_args()
    env = user_environ(bytecode=not args.no_bytecode)
    subprocess.run([sys.executable, "-m", "shipway", "--help"], env=env, capture_output=True)
    # the installed entry point (as a user runs it), else the module through this interpreter
    found = shutil.which("shipway")
    exe = [found] if found else [sys.executable, "-m", "shipway"]
    floor = statistics.median(measure([sys.executable, "-c", "pass"], args.runs, env))
    help_ms = statistics.median(measure([*exe, "--help"], args.runs, env))
    version_ms = statistics.median(measure([*exe, "validate", "--help"], args.runs, env))
    print("bytecode:", "kept (as an installed package)" if not args.no_bytecode else
          "not written (PYTHONDONTWRITEBYTECODE kept)")  # fmt: skip
    print(f"python -c pass          median {floor:6.1f} ms")
    print(f"shipway --help          median {help_ms:6.1f} ms  ({help_ms / floor:.1f}x the floor)")
    print(f"shipway validate --help median {version_ms:6.1f} ms")
    print(f"goal <= 150 ms: {'met' if help_ms <= 150 else 'NOT met'}")


if __name__ == "__main__":
    main()
