"""What every benchmark of issue 18 shares: the machine's load, percentiles, interleaved
rounds, and the JSON a later run is compared with.

The machine is shared (2 cores, load average often 10-20), so no benchmark here trusts an
absolute figure: each measures its peer in the same run, in interleaved rounds, and reports
the median of the per-round ratios. The JSON goes to ``bench/results/<name>.json`` (or
``--json PATH``); the previous file's ratios are printed beside the new ones. That directory
is run output of this machine, ignored by git: the figures worth keeping are written into
``docs/`` with the load they were measured under.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

RESULTS = Path(__file__).resolve().parent / "results"


def user_environ(bytecode: bool = True) -> dict[str, str]:
    """This process's environment, as a user's shell would give it to ``shipway``: an
    installed package's modules are compiled once (pip does it on install; an editable
    install's ``__pycache__`` is written on first use), so ``PYTHONDONTWRITEBYTECODE`` — set
    on some build machines, where every start compiles shipway's ~100 modules again, 0.1-0.2 s
    — is dropped unless ``bytecode`` is false (each bench's ``--no-bytecode``)."""
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) by nearest rank on the sorted values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process (all its threads) so far, from /proc (0 once
    it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Run:
    """One benchmark run: its arguments, the load at start and end, its figures."""

    def __init__(self, name: str, args: Mapping[str, Any]) -> None:
        self.name = name
        self.doc: dict[str, Any] = {
            "benchmark": name,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "args": dict(args),
            "load_average_start": load_average(),
        }
        print(f"{name}: load average at start {self.doc['load_average_start']}", flush=True)

    def finish(self, figures: Mapping[str, Any], path: Path | None = None) -> dict[str, Any]:
        self.doc["load_average_end"] = load_average()
        self.doc.update(figures)
        target = path or RESULTS / f"{self.name}.json"
        previous = _read(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.doc, indent=2) + "\n")
        print(f"{self.name}: load average at end {self.doc['load_average_end']}")
        print(f"{self.name}: figures written to {target}")
        if previous is not None:
            _compare(previous, self.doc)
        return self.doc


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _ratios(doc: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in doc.items():
        if isinstance(value, Mapping):
            out.update(_ratios(value, f"{prefix}{key}."))
        elif "ratio" in key and isinstance(value, int | float):
            out[prefix + key] = float(value)
    return out


def _compare(previous: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    before, now = _ratios(previous), _ratios(current)
    shared = [k for k in now if k in before]
    if not shared:
        return
    print(
        f"against the previous run ({previous.get('started')}, load "
        f"{previous.get('load_average_start')} -> {previous.get('load_average_end')}):"
    )
    for key in shared:
        print(f"  {key}: {before[key]:.2f} -> {now[key]:.2f}")
    sys.stdout.flush()


class Threads:
    """Request loops (``self.threads``, each looping until ``self.stop`` is set): started on
    entering, stopped and joined on leaving."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> Self:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
