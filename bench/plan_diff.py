"""Planning with the structured diff: what the diff adds to a plan, and how planning grows
with the number of apps.

Each app has 10 processes (ports, health checks, resources), 12 env keys, 2 secrets, 3
config files (one secret-bearing) and 2 routes, in a local slot, with a deployed release
and a target that matches it. Planning is what ``shipway plan`` does without its backend
round trips: the desired release (spec snapshot, config hash, secret marks), the local
renderer, the rollout steps, and the diff against the deployed release and the target.

Goal: the diff of a 10-process app adds at most 100 ms to a plan. Growth: planning 10, 50
and 100 apps (each with a changed env value and replicas) — the time per app stays flat
when it grows linearly.

    python bench/plan_diff.py [--runs 15] [--out plan_diff.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from shipway.backends.local.render import render
from shipway.engine.context import marked
from shipway.plan.diff import plan_diff
from shipway.plan.model import Observed, ObservedUnit
from shipway.plan.rollout import rollout_plan
from shipway.release.model import ImageMeta, Release, ReleaseStatus
from shipway.spec import App, parse
from shipway.spec.secrets import Secret

PROCESSES = 10
ROUTER_PORT = 8800


def spec_text(n: int, greeting: str = "hello", replicas: int = 2) -> str:
    parts = [f'[app]\nname = "app{n}"\nrelease_command = "migrate"\n']
    for p in range(PROCESSES):
        parts.append(
            f'[processes.p{p}]\ncommand = "serve --worker {p}"\nport = {8000 + p}\n'
            f"replicas = {replicas if p == 0 else 1}\n"
            f'[processes.p{p}.healthcheck]\npath = "/up"\ninterval = "500ms"\n'
            f'[processes.p{p}.resources]\nlimits = {{ memory = "256Mi", cpu = "500m" }}\n'
        )
    env = "\n".join(f'KEY_{k} = "value-{k}"' for k in range(11))
    parts.append(f'[env]\nGREETING = "{greeting}"\n{env}\n')
    parts.append(
        '[secrets]\nAPI_TOKEN = { from_env = "API_TOKEN" }\n'
        'DB_URL = { from_env = "DB_URL" }\n'
    )
    parts.append(
        '[files]\n"config/app.ini" = "token=${secrets.API_TOKEN}\\nmode=fast\\n"\n'
        '"config/a.txt" = "' + "line\\n" * 40 + '"\n"config/b.txt" = "b\\n"\n'
    )
    parts.append(
        f'[[routes]]\nhost = "app{n}.example.com"\nprocess = "p0"\n'
        f'[[routes]]\nhost = "api.app{n}.example.com"\nprocess = "p1"\n'
    )
    parts.append('[slots.local]\nbackend = "local"\n')
    return "\n".join(parts)


SECRETS = {"API_TOKEN": Secret("tok-bench-1"), "DB_URL": Secret("postgres://bench")}


def release_of(app: App, revision: int, records: list[Release]) -> Release:
    slot = app.slots.get("local")
    view = app.in_slot("local")
    release = Release(
        app=app.name,
        slot="local",
        revision=revision,
        status=ReleaseStatus.PENDING,
        image=f"local:/srv/{app.name}@sha256:" + "ab" * 32,
        digest="sha256:" + "ab" * 32,
        image_meta=ImageMeta("local", f"/srv/{app.name}"),
        deployment_ids={name: f"2026010100000{revision}-abc123" for name in view.processes},
        spec=view.snapshot(slot),
        config_hash=view.config_hash(SECRETS),
    )
    release = marked(release, SECRETS, records)
    return replace(release, artifact=render(view, slot, release, ROUTER_PORT))


def deployed_slot(app: App) -> tuple[list[Release], Observed]:
    anchor = replace(release_of(app, 1, []), status=ReleaseStatus.DEPLOYED)
    units = [
        ObservedUnit(u.key, u.kind, u.digest, "running", u.process, phase=u.phase)
        for u in anchor.artifact
    ]
    return [anchor], Observed.of(units, head="r1:deployed")


def plan_once(app: App, records: list[Release], observed: Observed, with_diff: bool) -> Any:
    desired = release_of(app, 2, records)
    the_plan = rollout_plan(
        operation="deploy",
        backend="local",
        release=desired,
        observed=observed,
        release_command=app.release_command,
    )
    if with_diff:
        return replace(the_plan, diff=plan_diff(records[0], desired, observed))
    return the_plan


def load(text: str) -> App:
    return parse(tomllib.loads(text), file="shipway.toml", base_dir=Path("."))


def timed(fn: Any, runs: int) -> float:
    """The best of ``runs`` calls, in seconds of this process's CPU time: what the work
    costs, whatever else the machine's 2 shared cores run meanwhile (wall-clock time of a
    100-app batch on a loaded machine mostly measures the other load). The garbage
    collector is paused while timing, as ``timeit`` does."""
    samples = []
    for _ in range(runs):
        samples.append(_one_sample(fn))
    return min(samples)


def _one_sample(fn: Any) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        fn()
        return time.process_time() - start
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", default="plan_diff.json", help="where to write the figures")
    args = parser.parse_args()

    # one 10-process app: the plan with and without its diff, and the diff alone
    app = load(spec_text(0, greeting="hi", replicas=3))
    records, observed = deployed_slot(load(spec_text(0)))
    desired = release_of(app, 2, records)
    runs = max(args.runs * 40, 200)
    diff_alone = timed(lambda: plan_diff(records[0], desired, observed), runs)
    with_diff = timed(lambda: plan_once(app, records, observed, True), runs)
    without = timed(lambda: plan_once(app, records, observed, False), runs)
    changes = len(plan_diff(records[0], desired, observed).changes)
    print(f"one app, {PROCESSES} processes, {changes} changes (best of {runs}):")
    print(f"  plan without the diff   {without * 1000:8.3f} ms")
    print(f"  plan with the diff      {with_diff * 1000:8.3f} ms")
    print(f"  the diff alone          {diff_alone * 1000:8.3f} ms  (goal <= 100 ms: "
          f"{'met' if diff_alone <= 0.1 else 'NOT met'})")  # fmt: skip

    # growth: plan N apps, each against its deployed release
    sizes = [10, 50, 100]
    fleet = [
        (load(spec_text(n, greeting="hi", replicas=3)), *deployed_slot(load(spec_text(n))))
        for n in range(max(sizes))
    ]
    growth = []
    print(f"planning N apps x {PROCESSES} processes, with diffs (best of {args.runs}):")
    best = {size: float("inf") for size in sizes}
    for _ in range(args.runs):  # the sizes interleaved: the machine's load falls on all alike
        for size in sizes:

            def plan_all(batch: list[Any] = fleet[:size]) -> None:
                for one, recs, seen in batch:
                    plan_once(one, recs, seen, True)

            best[size] = min(best[size], _one_sample(plan_all))
    for size in sizes:
        total = best[size]
        growth.append({"apps": size, "seconds": total, "ms_per_app": total / size * 1000})
        print(f"  {size:4d} apps  {total * 1000:9.1f} ms   {total / size * 1000:7.3f} ms per app")
    ratio = growth[-1]["ms_per_app"] / growth[0]["ms_per_app"]
    verdict = "linear" if 0.67 <= ratio <= 1.5 else "NOT linear"
    print(
        f"  per-app time at {sizes[-1]} apps / at {sizes[0]} apps: {ratio:.2f} "
        f"({verdict}: 1.0 is exactly linear)"
    )

    figures = {
        "processes_per_app": PROCESSES,
        "one_app": {
            "changes": changes,
            "plan_ms_without_diff": without * 1000,
            "plan_ms_with_diff": with_diff * 1000,
            "diff_ms": diff_alone * 1000,
            "goal_diff_ms": 100,
        },
        "growth": growth,
        "per_app_ratio_largest_to_smallest": ratio,
        "runs": args.runs,
        "statistic": "best of runs, process CPU time, garbage collector paused",
        "python": sys.version.split()[0],
    }
    Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
