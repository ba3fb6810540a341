"""Re-record the status sequences the rollout judge is unit-tested on.

    KUBECONFIG=... python tests/backends/kubernetes/statuses/record.py [behaviour ...]

For each behaviour it applies one Deployment (rendered by shipway, so pods carry the
template annotation) to a fresh namespace of the test control plane, then writes every
Deployment and Pod change seen by a watch, with its time since the apply, to
``<behaviour>.json`` (metadata trimmed to what the judge reads).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Pod

from shipway.backends.kubernetes import render
from shipway.release.model import Release, ReleaseStatus
from shipway.spec import parse

HERE = Path(__file__).parent
SECONDS = {
    "crashloop": 12,
    "oomkilled": 10,
    "pullfail": 8,
    "neverready": 6,
    "unschedulable": 8,
    "default": 5,
}


def trim(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    keep = {
        k: meta[k]
        for k in ("name", "labels", "annotations", "generation", "deletionTimestamp")
        if k in meta
    }
    out: dict[str, Any] = {"metadata": keep, "status": obj.get("status") or {}}
    if obj.get("kind") == "Deployment" or "replicas" in (obj.get("spec") or {}):
        out["spec"] = {
            k: obj["spec"][k] for k in ("replicas", "minReadySeconds") if k in obj["spec"]
        }
    return out


def record(client: Client, behaviour: str) -> None:
    ns = f"rec-{behaviour}-{uuid.uuid4().hex[:5]}"
    client.create(Namespace(metadata={"name": ns}))  # type: ignore[arg-type]
    tag = "1" if behaviour in ("default", "unschedulable") else behaviour
    spec = {
        "app": {"name": "rec"},
        "processes": {"web": {"port": 8000, "replicas": 2}},
        "slots": {"s": {"backend": "kubernetes", "namespace": ns}},
    }
    if behaviour == "unschedulable":
        spec["processes"]["web"]["resources"] = {"requests": {"cpu": "64"}}
    app = parse(spec)
    release = Release(
        app="rec",
        slot="s",
        revision=1,
        status=ReleaseStatus.PENDING,
        image=f"registry.example/rec:{tag}",
        deployment_ids={"web": "id-1"},
        config_hash="h",
    )
    units = render.render(app.in_slot("s"), app.slots.get("s"), release)
    dep = next(u for u in units if u.kind == "Deployment")
    seen: list[dict[str, Any]] = []
    start = time.monotonic()
    stop = threading.Event()

    def watch(res: Any) -> None:
        for _, obj in client.watch(res, namespace=ns, server_timeout=SECONDS[behaviour] + 2):
            if stop.is_set():
                return
            seen.append(
                {
                    "t": round(time.monotonic() - start, 2),
                    "kind": res.__name__,
                    "object": trim(obj.to_dict()),
                }
            )

    threads = [threading.Thread(target=watch, args=(r,), daemon=True) for r in (Deployment, Pod)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    start = time.monotonic()
    client.apply(from_dict(dict(dep.body)), field_manager="recorder")
    time.sleep(SECONDS[behaviour])
    stop.set()
    client.delete(Namespace, ns)
    out = {
        "behaviour": behaviour,
        "template": dep.body["spec"]["template"]["metadata"]["annotations"][render.TEMPLATE],
        "events": sorted(seen, key=lambda e: e["t"]),
    }
    (HERE / f"{behaviour}.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{behaviour}: {len(seen)} changes")


if __name__ == "__main__":
    c = Client(field_manager="recorder")
    for b in sys.argv[1:] or list(SECONDS):
        record(c, b)
