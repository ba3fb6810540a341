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

    python bench/cli_startup.py [--runs 21] [--pythonpath SRC] [--against SRC] [--only TEXT]

``--pythonpath``: run another source tree's shipway with this interpreter (e.g. an older
commit's ``src``: ``git archive COMMIT src | tar -x -C /tmp/old``). ``--against SRC``: run
SRC's shipway too, each case alternating between the two in every round, and print the
change: on a shared machine whose load moves by the minute, two runs one after the other
compare the load as much as the code.
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


def row(cpu: list[float], wall: list[float]) -> dict[str, float]:
    return {
        "cpu_median_ms": round(median(cpu), 1),
        "cpu_p90_ms": round(percentile(cpu, 90), 1),
        "wall_median_ms": round(median(wall), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--pythonpath", type=Path, help="another shipway's src directory")
    parser.add_argument(
        "--against", type=Path, metavar="SRC",
        help="also run the shipway of SRC (a src directory), in the same rounds: before/after",
    )  # fmt: skip
    parser.add_argument(
        "--no-bytecode", action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE (every start compiles shipway again)",
    )  # fmt: skip
    parser.add_argument("--only", help="the cases whose name contains this (the floor too)")
    parser.add_argument("--json", type=Path, help="where the figures go")
    args = parser.parse_args()
    run = Run("cli_startup", {k: str(v) for k, v in vars(args).items()})
    base = user_environ(bytecode=not args.no_bytecode)
    base = {k: v for k, v in base.items() if not k.startswith("SHIPWAY_")}
    trees: dict[str, dict[str, str]] = {}
    if args.against:  # first: "before"
        trees[str(args.against)] = {**base, "PYTHONPATH": str(args.against.resolve())}
    if args.pythonpath:
        trees[str(args.pythonpath)] = {**base, "PYTHONPATH": str(args.pythonpath.resolve())}
    else:
        trees["the installed shipway"] = dict(base)
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        app = Path(tmp) / "app"
        shutil.copytree(ROOT / "examples" / "hello", app)
        for env in trees.values():
            env["SHIPWAY_STATE_DIR"] = str(Path(tmp) / "state")
        todo = {
            name: cmd
            for name, cmd in cases(app / "shipway.toml").items()
            if not args.only or args.only in name or name == "python -c pass"
        }
        cpu: dict[tuple[str, str], list[float]] = {(t, n): [] for t in trees for n in todo}
        wall: dict[tuple[str, str], list[float]] = {(t, n): [] for t in trees for n in todo}
        for env in trees.values():  # once each first: bytecode written, caches warm
            for cmd in todo.values():
                once(cmd, env, app)
        for _ in range(args.runs):
            for name, cmd in todo.items():
                for tree, env in trees.items():
                    c, w = once(cmd, env, app)
                    cpu[tree, name].append(c)
                    wall[tree, name].append(w)
    print(f"bytecode {'not written' if args.no_bytecode else 'kept'}; ms, n={args.runs} each")
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for tree in trees:
        print(f"shipway from {tree}")
        print(f"  {'':26} {'CPU median':>10} {'CPU p90':>8} {'wall median':>11}")
        figures[tree] = {}
        for name in todo:
            r = figures[tree][name] = row(cpu[tree, name], wall[tree, name])
            print(
                f"  {name:26} {r['cpu_median_ms']:10.1f} {r['cpu_p90_ms']:8.1f}"
                f" {r['wall_median_ms']:11.1f}"
            )
        if "shipway --help" in figures[tree]:
            wall_ms = figures[tree]["shipway --help"]["wall_median_ms"]
            met = "met" if wall_ms <= 150 else "NOT met"
            print(f"  goal: shipway --help <= 150 ms wall: {met}")
    if len(trees) == 2:
        before, after = trees
        print(f"CPU median, {before} -> {after}")
        for name in todo:
            b = figures[before][name]["cpu_median_ms"]
            a = figures[after][name]["cpu_median_ms"]
            print(f"  {name:26} {b:7.1f} -> {a:7.1f}  ({a - b:+.1f} ms, {(a - b) / b:+.0%})")
    run.finish({"trees": figures}, args.json)


if __name__ == "__main__":
    main()
