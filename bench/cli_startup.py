"""What a `shipway` command pays before it does anything: the CPU time of a fresh process.

Each case runs ``--runs`` times, the cases interleaved round by round (a shared machine's
load then weighs on every case alike); each figure is the CPU time (user + system) of the
child process, read as the delta of ``resource.getrusage(RUSAGE_CHILDREN)`` around it, so
waiting for a core does not count. Median and p90 per case, and the wall-clock median:

- ``python -c pass``: the floor, what any Python start costs here;
- ``shipway --help`` (goal <= 150 ms wall);
- ``shipway -f SPEC validate`` and ``shipway -f SPEC plan local`` on a private copy of
  examples/hello with an empty state dir (the plan reads this machine's records and writes
  nothing);
- ``import shipway.backends.<name>.backend`` for local, docker and kubernetes: what a
  command of that slot's kind pays for its backend (and ``shipway.api``) before the first
  call.

    python bench/cli_startup.py [--runs 21] [--pythonpath SRC] [--no-bytecode]

``--pythonpath``: run another source tree's shipway with this interpreter (e.g. a checkout
of an older commit's ``src``), to compare two versions in the same minute.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import Run, median, percentile, user_environ

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("local", "docker", "kubernetes")


def cases(spec: Path) -> dict[str, list[str]]:
    py = sys.executable
    out = {
        "python -c pass": [py, "-c", "pass"],
        "shipway --help": [py, "-m", "shipway", "--help"],
        "shipway validate": [py, "-m", "shipway", "-f", str(spec), "validate"],
        "shipway plan local": [py, "-m", "shipway", "-f", str(spec), "plan", "local"],
    }
    for name in BACKENDS:
        out[f"import {name} backend"] = [py, "-c", f"import shipway.backends.{name}.backend"]
    return out


def once(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(CPU ms, wall ms) of one run of ``cmd``; a failed run stops the bench."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--pythonpath", type=Path, help="another shipway's src directory")
    parser.add_argument(
        "--no-bytecode", action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE (every start compiles shipway again)",
    )  # fmt: skip
    parser.add_argument("--only", help="the cases whose name contains this (the floor too)")
    parser.add_argument("--json", type=Path, help="where the figures go")
    args = parser.parse_args()
    run = Run("cli_startup", {k: str(v) for k, v in vars(args).items()})
    env = user_environ(bytecode=not args.no_bytecode)
    env = {k: v for k, v in env.items() if not k.startswith("SHIPWAY_")}
    if args.pythonpath:
        env["PYTHONPATH"] = str(args.pythonpath.resolve())
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        app = Path(tmp) / "app"
        shutil.copytree(ROOT / "examples" / "hello", app)
        env["SHIPWAY_STATE_DIR"] = str(Path(tmp) / "state")
        todo = {
            name: cmd
            for name, cmd in cases(app / "shipway.toml").items()
            if not args.only or args.only in name or name == "python -c pass"
        }
        for cmd in todo.values():  # once each first: bytecode written, caches warm
            once(cmd, env, app)
        cpu: dict[str, list[float]] = {name: [] for name in todo}
        wall: dict[str, list[float]] = {name: [] for name in todo}
        for _ in range(args.runs):
            for name, cmd in todo.items():
                c, w = once(cmd, env, app)
                cpu[name].append(c)
                wall[name].append(w)
    where = args.pythonpath or "the installed shipway"
    print(f"shipway from {where}; bytecode {'not written' if args.no_bytecode else 'kept'}")
    print(f"{'':26} {'CPU median':>10} {'CPU p90':>8} {'wall median':>11}   (ms, n={args.runs})")
    figures = {}
    for name in todo:
        row = {
            "cpu_median_ms": round(median(cpu[name]), 1),
            "cpu_p90_ms": round(percentile(cpu[name], 90), 1),
            "wall_median_ms": round(median(wall[name]), 1),
        }
        figures[name] = row
        print(
            f"{name:26} {row['cpu_median_ms']:10.1f} {row['cpu_p90_ms']:8.1f}"
            f" {row['wall_median_ms']:11.1f}"
        )
    if "shipway --help" in figures:
        help_wall = figures["shipway --help"]["wall_median_ms"]
        print(f"goal: shipway --help <= 150 ms wall: {'met' if help_wall <= 150 else 'NOT met'}")
    run.finish({"cases": figures}, args.json)


if __name__ == "__main__":
    main()
