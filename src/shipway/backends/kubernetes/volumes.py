"""PURE: the app's volumes as Kubernetes objects — one PersistentVolumeClaim per volume, the
slot's (never a generation's), mounted by the pods of the processes that use it.

A ReadWriteOnce claim is attached to one node at a time, so it cannot serve old and new
pods on two nodes. What shipway does about it:

* a Deployment whose pods mount one uses ``strategy: Recreate`` (its old pods stop before
  the new ones start), and the plan says ``not zero-downtime: <process> mounts
  ReadWriteOnce volume <name>``;
* every pod that mounts it — of every process and every generation of the slot — carries
  the label ``shipway.io/mounts.<name>`` and a required pod affinity to the others that do,
  on ``kubernetes.io/hostname``: they all run on the node that holds the claim, so a
  blue-green generation can start beside the live one, and replicas can share it.

A ``ReadWriteMany`` claim needs neither: Deployments keep rolling updates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shipway.backends.kubernetes.names import dns_name
from shipway.plan.model import ApplyObject, Plan
from shipway.spec.model import App, Slot
from shipway.spec.volumes import Volume, mounted_by

VOLUME_LABEL = "shipway.io/volume"  #: on a claim: the volume's name in the spec
MOUNTS = "shipway.io/mounts."  #: + name, on a pod that mounts a ReadWriteOnce claim
HOSTNAME = "kubernetes.io/hostname"


def claim_name(app: str, volume: str) -> str:
    return dns_name(app, volume, limit=253)


def pod_volume_name(volume: str) -> str:
    return dns_name("volume", volume)


def claim_body(
    app: str, namespace: str, labels: Mapping[str, str], volume: Volume
) -> dict[str, Any]:
    """The claim: the slot's labels (no generation: every generation mounts it), the size,
    the access mode, the storage class when one is named (else the cluster's default)."""
    spec: dict[str, Any] = {
        "accessModes": [volume.access_mode],
        "resources": {"requests": {"storage": volume.size}},
    }
    if volume.storage_class is not None:
        spec["storageClassName"] = volume.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(app, volume.name),
            "namespace": namespace,
            "labels": {**labels, VOLUME_LABEL: volume.name},
        },
        "spec": spec,
    }


def exclusive(volumes: Sequence[Volume]) -> list[Volume]:
    """The ReadWriteOnce ones."""
    return [v for v in volumes if v.access_mode == "ReadWriteOnce"]


def pod_parts(
    app: App, process: str, instance: Mapping[str, str], working_dir: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str], dict[str, Any] | None]:
    """For one process's pod: its claim volumes, its container's mounts, the labels that
    say which ReadWriteOnce claims it mounts, and the affinity keeping it beside the other
    pods that mount them (None: it mounts none)."""
    mine = mounted_by(app.volumes, process)
    volumes = [
        {
            "name": pod_volume_name(v.name),
            "persistentVolumeClaim": {"claimName": claim_name(app.name, v.name)},
        }
        for v in mine
    ]
    mounts = [{"name": pod_volume_name(v.name), "mountPath": v.target(working_dir)} for v in mine]
    rwo = exclusive(mine)
    marks = {MOUNTS + v.name: "true" for v in rwo}
    affinity = None
    if rwo:
        affinity = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {**instance, MOUNTS + v.name: "true"}},
                        "topologyKey": HOSTNAME,
                    }
                    for v in rwo
                ]
            }
        }
    return volumes, mounts, marks, affinity


def volume_notes(app: App, slot: Slot, plan: Plan) -> list[str]:
    """What a plan applying a Deployment that mounts a ReadWriteOnce claim cannot promise."""
    applied = {
        s.process
        for s in plan.steps
        if isinstance(s, ApplyObject) and s.kind == "Deployment" and s.process
    }
    notes = []
    for process in sorted(applied):
        for v in exclusive(mounted_by(app.volumes, process)):
            if slot.strategy == "blue-green":
                notes.append(
                    f"note: {process} mounts ReadWriteOnce volume {v.name}: the pods of every "
                    "generation that mount it run on the node that holds it (pod affinity)"
                )
            else:
                notes.append(
                    f"not zero-downtime: {process} mounts ReadWriteOnce volume {v.name} "
                    "(its Deployment uses strategy Recreate: the old pods stop before the "
                    'new ones start; access_mode = "ReadWriteMany" keeps rolling updates)'
                )
    return notes
