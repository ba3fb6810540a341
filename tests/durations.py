"""Write tests/durations.json from a whole run's ``--durations=0`` output:

    bash scripts/test --durations=0 | tee run.log
    python -m tests.durations run.log

Each test's setup, call and teardown are added up; tests of at least ``--min`` seconds
(default 3) are kept, the slowest first (tests/conftest.py starts them first)."""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

from tests.conftest import ungrouped

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+)\s*$")


def durations(text: str) -> dict[str, float]:
    total: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        found = LINE.match(line)
        if found:
            total[ungrouped(found.group(3))] += float(found.group(1))
    return dict(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--min", type=float, default=3.0)
    args = parser.parse_args()
    found = durations(args.log.read_text(errors="replace"))
    if not found:
        raise SystemExit(f"{args.log}: no '--durations=0' lines (run pytest with it)")
    kept = {k: round(v, 1) for k, v in sorted(found.items(), key=lambda kv: -kv[1])
            if v >= args.min}  # fmt: skip
    out = Path(__file__).with_name("durations.json")
    out.write_text(json.dumps(kept, indent=0) + "\n")
    print(f"{out}: {len(kept)} of {len(found)} tests (at least {args.min:g} s)")


if __name__ == "__main__":
    main()
