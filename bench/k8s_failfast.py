"""Fail fast: a rollout of a crash-looping image, shipway against Helm, in the same run.

For each tool, on the Kubernetes test control plane: deploy a healthy release (a
2-replica Deployment), then roll out the same workload with a crash-looping image. A pod
watcher notes when the first pod of the new image shows a doomed signal (an exited
container, CrashLoopBackOff). Printed per run and as medians:

* start → failure reported: from the start of the rollout to the tool saying it failed
  (shipway: the failure line it prints before rolling back; Helm: the upgrade returning
  its error, with ``wait="watcher"`` and ``rollback_on_failure=True``);
* first doomed signal → failure reported (goal for shipway: <= 5 s);
* start → returned, rollback included.

With ``--real-node`` both run on the test plane's real node (kubelet + containerd) instead
of kwok's simulated pods: the Docker test registry's ``web:v1``, then ``web:crash`` (exits 3
at once); the real kubelet restarts a crashed container with its own back-off.

    .venv/bin/python bench/k8s_failfast.py [--runs 3] [--helm-timeout 60] [--real-node]
"""

from __future__ import annotations

import argparse
import statistics
import time

from k8s_common import (
    CHARTS,
    DoomWatch,
    TimedLines,
    admin,
    kubeconfig,
    namespace,
    registry_image,
    tempdir,
)
from k8s_common import write_spec as spec_file
from lightkube.resources.core_v1 import Pod

from shipway import api
from shipway.spec import load


def images(real: bool) -> tuple[str, str]:
    """The healthy image and the crash-looping one."""
    if real:
        return registry_image("v1"), registry_image("crash")
    return "registry.example/bench:1", "registry.example/bench:crashloop"


def shipway_run(real: bool) -> tuple[float, float, float]:
    client = admin()
    _, doomed = images(real)
    with namespace(client, "ff-shipway", real) as ns:
        app = load(spec_file(tempdir(), ns, real=real))
        first = api.deploy(app, "bench")
        assert first.ok, first.line()
        watch = DoomWatch(client, ns, doomed.rpartition(":")[2])
        lines = TimedLines()
        start = time.monotonic()
        outcome = api.deploy(app, "bench", image=doomed, reporter=lines)
        returned = time.monotonic()
        watch.stop()
        assert outcome.kind == "rolled-back", outcome.line()
        reported = lines.first("CrashLoopBackOff")
        assert reported is not None and watch.first is not None
        return reported - start, reported - watch.first, returned - start


def helm_run(timeout: int, real: bool) -> tuple[float, float, float] | str:
    """Helm's three figures, or what it said instead of failing: its watcher judges the
    Deployment, and a container that exits at once is Running (and, with no readiness
    probe, ready) for an instant, so on real pods it can call a crash-looping release
    deployed."""
    import helm_python

    client = admin()
    healthy, doomed = images(real) if real else ("demo-app:1.0", "demo-app:crashloop")
    with (
        namespace(client, "ff-helm", real) as ns,
        helm_python.Config(kubeconfig_path=kubeconfig(), namespace=ns) as cfg,
    ):
        cfg.install(
            CHARTS / "demo",
            "demo",
            {"image": healthy},
            namespace=ns,
            wait="watcher",
            timeout=120,
        )
        watch = DoomWatch(client, ns, doomed.rpartition(":")[2])
        start = time.monotonic()
        try:
            cfg.upgrade(
                CHARTS / "demo",
                "demo",
                {"image": doomed},
                namespace=ns,
                wait="watcher",
                timeout=timeout,
                rollback_on_failure=True,
            )
        except helm_python.errors.HelmError:
            returned = time.monotonic()
        else:
            took = time.monotonic() - start
            watch.stop()
            pods = [
                f"{p.metadata.name} restarts {sum(c.restartCount for c in cs)}"
                for p in client.list(Pod, namespace=ns)
                for cs in [(p.status.containerStatuses or []) if p.status else []]
            ]
            return f"reported success after {took:.2f}s, no rollback; pods: {', '.join(pods)}"
        watch.stop()
        assert watch.first is not None
        # Helm says it failed only when the upgrade call returns (rollback done).
        return returned - start, returned - watch.first, returned - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--helm-timeout", type=int, default=60)
    parser.add_argument(
        "--real-node", action="store_true", help="real containers (the real node), not kwok"
    )
    args = parser.parse_args()
    kubeconfig()
    results: dict[str, list[tuple[float, float, float]]] = {"shipway": [], "helm": []}
    wrong: list[str] = []  # runs where Helm called the crash-looping release deployed
    for i in range(args.runs):
        runs = {
            "shipway": shipway_run(args.real_node),
            "helm": helm_run(args.helm_timeout, args.real_node),
        }
        for tool, row in runs.items():
            if isinstance(row, str):
                wrong.append(row)
                print(f"run {i + 1} {tool:8s} {row}")
                continue
            results[tool].append(row)
            a, b, c = row
            print(
                f"run {i + 1} {tool:8s} start->failure {a:6.2f}s  first signal->failure "
                f"{b:6.2f}s  start->returned {c:6.2f}s"
            )
    print()
    for tool, rows in results.items():
        if not rows:
            continue
        med = [statistics.median(r[k] for r in rows) for k in range(3)]
        print(
            f"median   {tool:8s} start->failure {med[0]:6.2f}s  first signal->failure "
            f"{med[1]:6.2f}s  start->returned {med[2]:6.2f}s  (of {len(rows)} runs)"
        )
    if wrong:
        print(f"helm called the crash-looping release deployed in {len(wrong)} of {args.runs} runs")
    worst = max(r[1] for r in results["shipway"])
    print(
        f"goal: shipway reports failure <= 5 s after the first doomed signal: "
        f"{'met' if worst <= 5 else 'NOT met'} (worst {worst:.2f}s)"
    )


if __name__ == "__main__":
    main()
