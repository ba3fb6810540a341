"""A 200-object manifests source: deploy and no-op redeploy, shipway against Helm
(helm-python-sdk, the Helm 4 Go SDK) installing and upgrading the same objects as a chart,
in the same run: wall time and API requests (from the API server's audit log).

The objects: 40 Deployments (1 replica each) with a Service each, 60 ConfigMaps, 40
Secrets and 20 ServiceAccounts. shipway reads them as a manifests source; Helm gets a chart
whose one template is the same YAML. Both wait until everything is ready (shipway: its
waits; Helm: ``wait="watcher"``). The "redeploy" changes nothing: shipway plans no change,
Helm upgrades to a new revision of the same chart and values. Requests are the admin's
about the benchmark's namespace (or the Namespace itself), one per audit ID.

    .venv/bin/python bench/k8s_manifests.py [--runs N] [--json FILE] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import yaml
from k8s_common import AuditLog, admin, by_verb, kubeconfig, namespace, tempdir

from shipway import api
from shipway.spec import load

DEPLOYMENTS, CONFIGMAPS, SECRETS, ACCOUNTS = 40, 60, 40, 20
OBJECTS = 2 * DEPLOYMENTS + CONFIGMAPS + SECRETS + ACCOUNTS


def objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(ACCOUNTS):
        out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": f"sa{i}"}})
    for i in range(CONFIGMAPS):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"config{i}"},
                "data": {"index": str(i), "greeting": "hello"},
            }
        )
    for i in range(SECRETS):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"secret{i}"},
                "stringData": {"token": f"bench-token-{i}"},
            }
        )
    for i in range(DEPLOYMENTS):
        labels = {"app": f"svc{i}"}
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"svc{i}"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": f"sa{i % ACCOUNTS}",
                            "containers": [
                                {
                                    "name": "app",
                                    "image": "registry.example/bench:1",
                                    "envFrom": [{"configMapRef": {"name": f"config{i}"}}],
                                    "ports": [{"containerPort": 8080}],
                                }
                            ],
                        },
                    },
                },
            }
        )
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"svc{i}"},
                "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
            }
        )
    assert len(out) == OBJECTS
    return out


def stream() -> str:
    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in objects())


def source_spec(ns: str) -> Path:
    root = tempdir()
    (root / "k8s").mkdir()
    (root / "k8s" / "all.yaml").write_text(stream())
    (root / "shipway.toml").write_text(
        "\n".join(
            [
                "[app]",
                'name = "bench"',
                "",
                "[slots.bench]",
                'backend = "kubernetes"',
                f'namespace = "{ns}"',
                "",
                "[slots.bench.source]",
                'manifests = ["k8s/"]',
                "",
            ]
        )
    )
    return root / "shipway.toml"


def chart() -> Path:
    root = tempdir() / "twohundred"
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text("apiVersion: v2\nname: twohundred\nversion: 0.1.0\n")
    (root / "templates" / "all.yaml").write_text(stream())
    return root


def settle(log: AuditLog, ns: str) -> list[dict[str, Any]]:
    """The requests once the audit log stops growing (a watch is logged when it closes)."""
    seen = -1
    while True:
        time.sleep(1.0)
        events = log.requests(ns)
        if len(events) == seen:
            return events
        seen = len(events)


def run_shipway(log: AuditLog, verbose: bool) -> dict[str, dict[str, float]]:
    client = admin()
    out: dict[str, dict[str, float]] = {}
    with namespace(client, "src-shipway") as ns:
        app = load(source_spec(ns))
        for step in ("deploy", "redeploy"):
            log.mark()
            start = time.monotonic()
            outcome = api.deploy(app, "bench")
            seconds = time.monotonic() - start
            assert outcome.ok, outcome.line()
            events = settle(log, ns)
            out[step] = {"seconds": seconds, "requests": len(events)}
            if verbose:
                print(f"  shipway {step}: {by_verb(events)}")
    return out


def run_helm(log: AuditLog, verbose: bool) -> dict[str, dict[str, float]]:
    import helm_python

    client = admin()
    out: dict[str, dict[str, float]] = {}
    path = chart()
    with (
        namespace(client, "src-helm") as ns,
        helm_python.Config(kubeconfig_path=kubeconfig(), namespace=ns) as cfg,
    ):
        for step, call in (("deploy", cfg.install), ("redeploy", cfg.upgrade)):
            log.mark()
            start = time.monotonic()
            call(path, "bench", {}, namespace=ns, wait="watcher", timeout=300)
            seconds = time.monotonic() - start
            events = settle(log, ns)
            out[step] = {"seconds": seconds, "requests": len(events)}
            if verbose:
                print(f"  helm {step}: {by_verb(events)}")
    return out


def median(runs: list[dict[str, dict[str, float]]], step: str, what: str) -> float:
    return statistics.median(r[step][what] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1, help="runs of each (medians shown)")
    parser.add_argument("--json", default="k8s_manifests.json", help="where to write figures")
    parser.add_argument("--verbose", action="store_true", help="requests by verb and resource")
    args = parser.parse_args()
    kubeconfig()
    log = AuditLog()
    ship, helm = [], []
    for _ in range(args.runs):
        ship.append(run_shipway(log, args.verbose))
        helm.append(run_helm(log, args.verbose))
    result: dict[str, Any] = {"objects": OBJECTS, "runs": args.runs}
    print(f"{OBJECTS} objects, median of {args.runs}")
    print("                      shipway       helm   helm/shipway")
    for step in ("deploy", "redeploy"):
        for what, unit in (("seconds", "s"), ("requests", "")):
            s, h = median(ship, step, what), median(helm, step, what)
            ratio = h / s if s else float("inf")
            result[f"{step}_{what}"] = {"shipway": s, "helm": h, "ratio": ratio}
            label = f"{step} {what}"
            print(f"  {label:18s} {s:9.2f}{unit:1s} {h:9.2f}{unit:1s} {ratio:10.1f}x")
    result["raw"] = {"shipway": ship, "helm": helm}
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
