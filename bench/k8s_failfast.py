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

    .venv/bin/python bench/k8s_failfast.py [--runs 3] [--helm-timeout 60]
"""

from __future__ import annotations

import argparse
import statistics
import time

from k8s_common import CHARTS, DoomWatch, TimedLines, admin, kubeconfig, namespace, tempdir
from k8s_common import write_spec as spec_file

from shipway import api
from shipway.spec import load


def shipway_run() -> tuple[float, float, float]:
    client = admin()
    with namespace(client, "ff-shipway") as ns:
        app = load(spec_file(tempdir(), ns))
        first = api.deploy(app, "bench")
        assert first.ok, first.line()
        watch = DoomWatch(client, ns, "crashloop")
        lines = TimedLines()
        start = time.monotonic()
        outcome = api.deploy(app, "bench", image="registry.example/bench:crashloop", reporter=lines)
        returned = time.monotonic()
        watch.stop()
        assert outcome.kind == "rolled-back", outcome.line()
        reported = lines.first("CrashLoopBackOff")
        assert reported is not None and watch.first is not None
        return reported - start, reported - watch.first, returned - start


def helm_run(timeout: int) -> tuple[float, float, float]:
    import helm_python

    client = admin()
    with (
        namespace(client, "ff-helm") as ns,
        helm_python.Config(kubeconfig_path=kubeconfig(), namespace=ns) as cfg,
    ):
        cfg.install(
            CHARTS / "demo",
            "demo",
            {"image": "demo-app:1.0"},
            namespace=ns,
            wait="watcher",
            timeout=120,
        )
        watch = DoomWatch(client, ns, "crashloop")
        start = time.monotonic()
        try:
            cfg.upgrade(
                CHARTS / "demo",
                "demo",
                {"image": "demo-app:crashloop"},
                namespace=ns,
                wait="watcher",
                timeout=timeout,
                rollback_on_failure=True,
            )
            raise AssertionError("helm reported success for a crash-looping image")
        except helm_python.errors.HelmError:
            returned = time.monotonic()
        watch.stop()
        assert watch.first is not None
        # Helm says it failed only when the upgrade call returns (rollback done).
        return returned - start, returned - watch.first, returned - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--helm-timeout", type=int, default=60)
    args = parser.parse_args()
    kubeconfig()
    results: dict[str, list[tuple[float, float, float]]] = {"shipway": [], "helm": []}
    for i in range(args.runs):
        results["shipway"].append(shipway_run())
        results["helm"].append(helm_run(args.helm_timeout))
        for tool in results:
            a, b, c = results[tool][-1]
            print(
                f"run {i + 1} {tool:8s} start->failure {a:6.2f}s  first signal->failure "
                f"{b:6.2f}s  start->returned {c:6.2f}s"
            )
    print()
    for tool, rows in results.items():
        med = [statistics.median(r[k] for r in rows) for k in range(3)]
        print(
            f"median   {tool:8s} start->failure {med[0]:6.2f}s  first signal->failure "
            f"{med[1]:6.2f}s  start->returned {med[2]:6.2f}s"
        )
    worst = max(r[1] for r in results["shipway"])
    print(
        f"goal: shipway reports failure <= 5 s after the first doomed signal: "
        f"{'met' if worst <= 5 else 'NOT met'} (worst {worst:.2f}s)"
    )


if __name__ == "__main__":
    main()
