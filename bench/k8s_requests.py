"""API requests per deploy of a 10-process app, from the API server's audit log, against
Helm (helm-python-sdk, the Helm 4 Go SDK) deploying the same objects with the watcher wait.

Both get the same workload: 10 Deployments (1 replica each) with a Service each, and
their environment (shipway: a Secret; the chart: a ConfigMap). Counted: requests by the
admin user about the benchmark's namespace (or the Namespace itself), one per audit ID,
for a first deploy and for an upgrade to a new image.

    .venv/bin/python bench/k8s_requests.py [--verbose]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from k8s_common import AuditLog, admin, by_verb, kubeconfig, namespace, tempdir, write_spec

from shipway import api
from shipway.spec import load

PROCESSES = 10

CHART = """apiVersion: v2
name: tenproc
version: 0.1.0
"""
TEMPLATE = """{{- range $i, $p := .Values.processes }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $.Release.Name }}-{{ $p }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: {{ $.Release.Name }}, component: {{ $p }}}
  template:
    metadata:
      labels: {app: {{ $.Release.Name }}, component: {{ $p }}}
    spec:
      containers:
        - name: {{ $p }}
          image: {{ $.Values.image | quote }}
          args: ["serve", "{{ $i }}"]
          envFrom: [{configMapRef: {name: {{ $.Release.Name }}-env}}]
          ports: [{containerPort: {{ add 8000 $i }}}]
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $.Release.Name }}-{{ $p }}
spec:
  selector: {app: {{ $.Release.Name }}, component: {{ $p }}}
  ports: [{port: {{ add 8000 $i }}, targetPort: {{ add 8000 $i }}}]
{{- end }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-env
data:
  MESSAGE: hello
"""


def chart() -> Path:
    root = tempdir() / "tenproc"
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text(CHART)
    (root / "templates" / "all.yaml").write_text(TEMPLATE)
    return root


def count_shipway(log: AuditLog, verbose: bool) -> tuple[int, int]:
    client = admin()
    counts = []
    with namespace(client, "req-shipway") as ns:
        app = load(write_spec(tempdir(), ns, processes=PROCESSES, replicas=1))
        for image in ("registry.example/bench:1", "registry.example/bench:2"):
            log.mark()
            outcome = api.deploy(app, "bench", image=image)
            assert outcome.ok, outcome.line()
            time.sleep(1.5)  # let the audit log write the closed watches
            events = log.requests(ns)
            counts.append(len(events))
            if verbose:
                print(f"  shipway {image}: {by_verb(events)}")
    return counts[0], counts[1]


def count_helm(log: AuditLog, verbose: bool) -> tuple[int, int]:
    import helm_python

    client = admin()
    counts = []
    path = chart()
    values = {"processes": [f"p{i}" for i in range(PROCESSES)]}
    with (
        namespace(client, "req-helm") as ns,
        helm_python.Config(kubeconfig_path=kubeconfig(), namespace=ns) as cfg,
    ):
        for step, image in (("install", "demo-app:1"), ("upgrade", "demo-app:2")):
            log.mark()
            call = cfg.install if step == "install" else cfg.upgrade
            call(
                path, "bench", {**values, "image": image}, namespace=ns, wait="watcher", timeout=120
            )
            time.sleep(1.5)
            events = log.requests(ns)
            counts.append(len(events))
            if verbose:
                print(f"  helm {step}: {by_verb(events)}")
    return counts[0], counts[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--verbose", action="store_true", help="requests by verb and resource")
    args = parser.parse_args()
    kubeconfig()
    log = AuditLog()
    ship = count_shipway(log, args.verbose)
    helm = count_helm(log, args.verbose)
    print(f"API requests, {PROCESSES}-process app   first deploy   upgrade")
    print(f"  shipway                           {ship[0]:12d}   {ship[1]:7d}")
    print(f"  helm (watcher wait)               {helm[0]:12d}   {helm[1]:7d}")


if __name__ == "__main__":
    main()
