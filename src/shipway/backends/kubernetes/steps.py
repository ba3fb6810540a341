"""The steps of a rolling plan, one at a time, and the release records they leave.

Every method here mutates the slot, so each starts with the one guard preamble
(``self._guard``): the clearance covers the target, the target is the one this backend
serves, the Lease is still ours. Objects are sent by server-side apply (field manager
``shipway``) with their placeholders replaced by the secret values, which are remembered
so that no later message shows one.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.types import CascadeType

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.canary import KubernetesCanaries
from shipway.backends.kubernetes.hosts import KubernetesHosts
from shipway.backends.kubernetes.release_command import KubernetesReleaseCommand
from shipway.backends.kubernetes.sources import is_source_unit
from shipway.backends.kubernetes.state import RESOURCES
from shipway.backends.protocol import Reporter
from shipway.errors import CleanupFailed
from shipway.guard import Clearance
from shipway.plan.model import Remove
from shipway.release.artifact import Unit
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret, reveal


class KubernetesSteps(KubernetesReleaseCommand, KubernetesCanaries, KubernetesHosts):
    """Records, apply, remove, the release command and stop (the waits are health's). A
    source's objects are the source part's to apply, remove and stop (``self.source``),
    and so are the Secret data of its revisions, kept with the records."""

    def write_records(
        self, clearance: Clearance, target: Target, records: Sequence[Release]
    ) -> None:
        self._guard(clearance, target)
        self.source.write_values(records)  # a pending source release's Secret data first
        self._guard(clearance, target)  # the Lease still ours, before the records too
        with self._edge(f"writing the release records of {target}"):
            self._store().write(records)
        self.source.records_written(records)

    def delete_records(
        self, clearance: Clearance, target: Target, revisions: Sequence[int]
    ) -> None:
        self._guard(clearance, target)
        with self._edge(f"deleting old release records of {target}"):
            self._store().delete(revisions)
        self.source.delete_values(target, revisions)

    def apply(
        self,
        clearance: Clearance,
        target: Target,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None:
        if is_source_unit(unit):
            self.source.apply(clearance, target, unit, action, reporter)
            return
        self._guard(clearance, target)
        self._secrets.update(secrets)
        body = manifest(unit, secrets)
        routed = unit.kind == "Ingress" and unit.generation is None  # a rolling slot's host
        with self._edge(f"applying {unit.key}"):
            before = self._live("Ingress", str(unit.body["metadata"]["name"])) if routed else None
            try:
                applied = self.client.apply(from_dict(body), force=True)
            except ApiError as exc:
                if unit.kind != "Namespace" or exc.status.code != 403:
                    raise
                # We hold a Lease in it, so it exists; labelling it needs cluster rights.
                reporter.line(
                    f"namespace {self.namespace}: no rights to manage the Namespace object "
                    "itself (a namespace-scoped identity); using it as it is"
                )
                return
        if routed:
            self._take_routed(unit, before, reporter)
            self.route_beside(unit)  # a canary slot: the host's HTTPRoute too
        if unit.kind == "Deployment" and applied.metadata is not None:
            self._generations[unit.key] = int(applied.metadata.generation or 0)
            live = applied.spec.replicas if applied.spec is not None else None
            wanted = render.declared_replicas(unit.body)
            if unit.generation and action in ("create", "start") and live != wanted:
                # Applied without a count (it defaults to 1), or stopped: the declared
                # count, set where Scale sets it.
                name = str(unit.body["metadata"]["name"])
                with self._edge(f"scaling {name} to {wanted}"):
                    self._scale_to(name, wanted)

    def remove(
        self, clearance: Clearance, target: Target, step: Remove, reporter: Reporter
    ) -> None:
        if self.source.observed(step.unit):
            self.source.remove(clearance, target, step)
            return
        self._guard(clearance, target)
        kind, name = render.split_key(step.unit)
        if kind == "Namespace" or kind not in RESOURCES:
            raise CleanupFailed(
                f"{step.unit} is not removed by shipway",
                f"delete {step.unit} yourself if it is no longer needed",
            )
        fix = f"delete {kind} {name} in namespace {self.namespace}"
        self.unroute(name)  # a canary's object: no route sends to it any more
        with self._edge(f"removing {step.unit}", cleanup_fix=fix):
            try:
                self.client.delete(
                    RESOURCES[kind], name, namespace=self.namespace, cascade=CascadeType.BACKGROUND
                )
            except ApiError as exc:
                if exc.status.code != 404:
                    raise

    def stop(self, clearance: Clearance, target: Target, reporter: Reporter) -> None:
        """Scale every process of the slot to zero (records and objects stay); on a source
        slot, the source's workloads too."""
        self._guard(clearance, target)
        with self._edge(f"stopping {target}"):
            for dep in self.client.list(
                Deployment, namespace=self.namespace, labels=self._labels()
            ):
                self.client.patch(
                    Deployment,
                    dep.metadata.name,
                    {"spec": {"replicas": 0}},
                    namespace=self.namespace,
                )
                reporter.line(f"scaled {dep.metadata.name} to 0")
        if self.slot.source is not None:
            self.source.stop(target, reporter)


def manifest(unit: Unit, secrets: Mapping[str, Secret]) -> dict[str, Any]:
    """What is sent: placeholders replaced by values, Secret ``stringData`` as ``data``
    (server-side apply tracks ``data``; fields applied as stringData could never be
    removed again), the unit digest as an annotation."""
    body: dict[str, Any] = reveal(render.with_digest(unit), secrets)
    if body.get("kind") == "Secret" and "stringData" in body:
        data = body.pop("stringData")
        body["data"] = {k: base64.b64encode(str(v).encode()).decode() for k, v in data.items()}
    return body
