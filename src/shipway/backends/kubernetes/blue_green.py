"""Blue-green: generations side by side in the slot's namespace, scaled, waited on, and
hosts moved between them.

A generation is a set of objects labelled ``shipway.io/generation`` (see :mod:`.render`
and the pure readings of :mod:`.generations`); each host is one Ingress of the slot,
pointed at one generation's Service. ``scale`` sets a generation's replicas through the
scale subresource, ``wait_replicas`` watches that generation's pods (health's rollout
judge), ``point_host`` moves the host's one Ingress to the generation's Service (one write:
the switch), ``drop_host`` deletes the old generation's Service the host used to reach
(best effort: nothing routes to it any more). What must never happen, and where it is
prevented:
  * a generation put to sleep under its traffic — ``scale`` to zero refuses a generation an
    Ingress routes to;
  * an apply reverting a scale — a generation's Deployments are applied without
    ``spec.replicas`` (the scale subresource's field manager holds it);
  * a host taken from another app behind the engine's back — ``point_host`` takes a host
    from another Ingress only when ``host_owner`` named that owner in this operation (the
    engine refuses that unless ``--take-host``).
"""

from __future__ import annotations

from typing import Any

from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.operators import exists
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Secret as SecretObject
from lightkube.resources.core_v1 import Service
from lightkube.resources.networking_v1 import Ingress
from lightkube.types import CascadeType

from shipway.backends.kubernetes import generations as gens
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.endpoints import wait_listed
from shipway.backends.kubernetes.health import KubernetesHealth
from shipway.backends.kubernetes.hosts import KubernetesHosts
from shipway.backends.kubernetes.rollout import Watched, readiness_window
from shipway.backends.kubernetes.state import RESOURCES, Session
from shipway.backends.protocol import Failure, GenerationInfo, Reason, Reporter
from shipway.errors import BackendError, CleanupFailed, InputError
from shipway.guard import Clearance
from shipway.plan.model import DropHost, PointHost, Scale, WaitReplicas
from shipway.release.artifact import Unit
from shipway.release.model import Release
from shipway.spec.model import App, Route, Target
from shipway.spec.parse import from_snapshot


class KubernetesBlueGreen(KubernetesHealth, KubernetesHosts):
    """The protocol's Generations part (a replica wait is judged like a rollout); who
    serves a host, and taking it, are :mod:`.hosts`'."""

    def _generation_of(self, step: Scale | WaitReplicas | PointHost | DropHost) -> str:
        if not step.generation:
            raise BackendError(
                "the kubernetes backend scales, waits on and routes to generations only "
                f"(step: {step.describe()})"
            )
        return step.generation

    def _gen_labels(self, generation: str | None = None) -> dict[str, Any]:
        """The app's selector labels and a generation's (any generation's, without one)."""
        return {**self._labels(), render.GENERATION: generation or exists()}

    def _slot_ingresses(self) -> list[dict[str, Any]]:
        return [
            i.to_dict()
            for i in self.client.list(Ingress, namespace=self.namespace, labels=self._labels())
        ]

    def _routed_hosts(self, generation: str) -> list[str]:
        """The hosts the slot's Ingresses route to ``generation``."""
        return sorted(
            str(rule.get("host"))
            for ing in self._slot_ingresses()
            if gens.routes_to(ing) == generation
            for rule in (ing.get("spec") or {}).get("rules") or []
        )

    def generations(self, target: Target) -> list[GenerationInfo]:
        """Oldest first. Live: the generation the slot's Ingresses route to (without hosts,
        the deployed release's while it runs); awake: its Deployments ask for pods; asleep:
        they are scaled to zero."""
        self._serves(target)
        with self._edge(f"listing the generations of {target}"):
            labels = self._gen_labels()
            deployments = [
                d.to_dict()
                for d in self.client.list(Deployment, namespace=self.namespace, labels=labels)
            ]
            # every generation's env Secret is applied first: a generation whose
            # Deployments were never created is still found (and can be gc'ed)
            secrets = [
                s.to_dict()
                for s in self.client.list(SecretObject, namespace=self.namespace, labels=labels)
            ]
            ingresses = self._slot_ingresses()
            records = self._store().read()
        return gens.generation_infos(secrets, deployments, ingresses, records)

    def scale(self, clearance: Clearance, target: Target, step: Scale, reporter: Reporter) -> None:
        """Set the replicas of a generation's process through the scale subresource. A
        generation an Ingress routes to is never put to sleep."""
        self._guard(clearance, target)
        generation = self._generation_of(step)
        name = render.workload_name(self.app.name, step.process, generation)
        with self._edge(f"scaling {name} to {step.replicas}"):
            if step.replicas == 0:
                served = self._routed_hosts(generation)
                if served:
                    raise BackendError(
                        f"generation {generation} serves {', '.join(served)}: it is not put "
                        "to sleep under its traffic (hint: switch to another generation first)"
                    )
            try:
                self._scale_to(name, step.replicas)
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
                if step.replicas == 0:  # e.g. recovering a deploy that died before applying
                    reporter.line(
                        f"  generation {generation} runs no {step.process}: nothing to stop"
                    )
                    return
                raise BackendError(
                    f"generation {generation} has no Deployment {name} "
                    f"(hint: shipway gens {target.slot})"
                ) from exc
        reporter.line(f"  Deployment {name}: {step.replicas} replicas")

    def _watch_generation(self, generation: str) -> Session:
        """One list and one watch each for the Deployments and Pods of a generation, opened
        at its first replica wait (after its scale) and shared by the others."""
        watches = self._generation_watches.get(generation)
        if watches is None or watches.dead:  # never share a dead stream
            if watches is not None:
                watches.stop()
            watches = self._open_watches({render.GENERATION: generation}, carry=watches)
            self._generation_watches[generation] = watches
        return watches

    def wait_replicas(
        self, target: Target, step: WaitReplicas, deadline: float, reporter: Reporter
    ) -> Failure | None:
        """The health gate of a generation: its Deployment asks for ``step.replicas`` and
        they are all updated and available, judged like a rollout (failing fast on doomed
        pods of its current template)."""
        self._serves(target)
        generation = self._generation_of(step)
        name = render.workload_name(self.app.name, step.process, generation)
        if step.replicas == 0:
            return None
        temporary = self._session is None
        try:
            with self._edge(f"watching generation {generation}"):
                watches = self._watch_generation(generation)
            live = watches.deployments.snapshot().get(name)
            if live is None:
                return Failure(
                    reason=Reason.NOT_FOUND,
                    message=f"generation {generation} has no Deployment {name}",
                    process=step.process,
                )
            template = (
                live["spec"]["template"]["metadata"].get("annotations", {}).get(render.TEMPLATE)
            )
            watched = Watched(
                process=step.process,
                deployment=name,
                template=str(template or ""),
                replicas=step.replicas,
                readiness_window=readiness_window(live, self.tuning),
            )
            # pods that ran before this operation (a generation woken earlier): their
            # earlier exits are not held against it
            baseline = self._session.pods.initial if self._session else None
            before = self._session.deployments.initial if self._session else None
            return self._wait(
                target,
                watches,
                step.process,
                [watched],
                deadline,
                reporter,
                baseline=baseline,
                before=before,
                replicas=step.replicas,
            )
        finally:
            if temporary:
                self._stop_generation_watches()

    def _generation_record(self, generation: str) -> Release | None:
        """The newest record of a release that ran (or is running) in ``generation``."""
        ran = [r for r in self._store().read() if r.generation == generation]
        return max(ran, key=lambda r: r.revision) if ran else None

    def _route(self, host: str, record: Release | None) -> tuple[App, Route]:
        """The route of ``host`` as the generation's release declared it (else as the spec
        declares it now), and the app it belongs to."""
        for app in (
            from_snapshot(record.spec, self.app.source_dir) if record and record.spec else None,
            self.app.in_slot(self.slot.name),
        ):
            if app is None:
                continue
            for route in app.routes:
                if route.host.lower() == host.lower():
                    return app, route
        raise BackendError(f"no route declares host {host}")

    def _ensure_service(self, record: Release | None, name: str, reporter: Reporter) -> None:
        """The generation's Service a host is pointed at exists: an asleep generation's
        was dropped at the switch that put it to sleep; it comes back from its record."""
        try:
            service = self.client.get(Service, name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            service = None
        if service is not None:
            if service.metadata and service.metadata.deletionTimestamp:
                raise BackendError(
                    f"Service {name} is being deleted (finalizers: "
                    f"{', '.join(service.metadata.finalizers or [])}): no host is pointed at it"
                )
            return
        key = render.unit_key("Service", name)
        units = [u for u in record.artifact if u.key == key] if record else []
        if not units:
            raise BackendError(f"Service {name} is gone and no release record holds it")
        self.client.apply(from_dict(render.with_digest(units[0])), force=True)
        reporter.line(f"  Service {name} re-created from r{record.revision if record else '?'}")

    def point_host(
        self, clearance: Clearance, target: Target, step: PointHost, reporter: Reporter
    ) -> None:
        """Point the host's Ingress (the slot's one object for it) at the generation's
        Service: one server-side apply, so traffic moves in one step. A host another app
        or slot served, which ``host_owner`` named in this operation, is then taken out of
        that Ingress; if that fails, the Ingress is put back and the step fails."""
        self._guard(clearance, target)
        generation = self._generation_of(step)
        name = render.ingress_name(self.app.name, step.host)
        with self._edge(f"pointing {step.host} at generation {generation}"):
            record = self._generation_record(generation)
            app, route = self._route(step.host, record)
            service = render.workload_name(self.app.name, route.process, generation)
            self._ensure_service(record, service, reporter)
            wait_listed(self.client, self.namespace, service, service, reporter)
            before = self._live("Ingress", name)
            body = render.host_ingress(app, self.slot.name, self.namespace, route, generation)
            unit = Unit(render.unit_key("Ingress", name), "Ingress", body, phase=2)
            self.client.apply(from_dict(render.with_digest(unit)), force=True)
        was = gens.routes_to(before.to_dict()) if before is not None else None
        try:
            self._take(step.host, reporter)
        except BackendError:
            self._put_back(name, before, reporter)
            raise
        if self._owner_scope:
            reporter.line(f"  note: {self._owner_scope}")
        reporter.line(
            f"  {step.host} -> Service {service} of generation {generation} "
            f"(Ingress {name}; was {f'generation {was}' if was else 'not routed here'})"
        )

    def drop_host(
        self, clearance: Clearance, target: Target, step: DropHost, reporter: Reporter
    ) -> None:
        """The generation no longer serves the host. If the host's Ingress still routes to
        it (undoing a switch with nothing to go back to), the Ingress is deleted; then the
        generation's Service the host reached it through is deleted, unless another host
        still routes to it. Dropped means gone: a delete the API refuses, or one that
        finalizers hold back, is reported with the manual fix (CleanupFailed) — the host
        already routes elsewhere, so it never fails the switch."""
        self._guard(clearance, target)
        generation = self._generation_of(step)
        name = render.ingress_name(self.app.name, step.host)
        doing = f"dropping {step.host} from generation {generation}"
        with self._edge(doing, cleanup_fix=self._drop_fix(step.host, generation)):
            ingress = self._live("Ingress", name)
            if ingress is not None and gens.routes_to(ingress.to_dict()) == generation:
                self.client.delete(Ingress, name, namespace=self.namespace)
                reporter.line(f"  deleted Ingress {name}: {step.host} is not routed any more")
            _, route = self._route(step.host, self._generation_record(generation))
            service = render.workload_name(self.app.name, route.process, generation)
            still = [
                i["metadata"]["name"]
                for i in self._slot_ingresses()
                if gens.routes_to(i) == generation and service in gens.backends_of(i)
            ]
            if still:
                reporter.line(f"  Service {service} kept: {', '.join(still)} still route to it")
                return
            self._delete_service(service, reporter)

    def _drop_fix(self, host: str, generation: str) -> str:
        try:
            _, route = self._route(host, None)
            service = render.workload_name(self.app.name, route.process, generation)
        except BackendError:
            service = f"the Service of generation {generation} that served {host}"
        return f"delete Service {service} in namespace {self.namespace}"

    def _delete_service(self, name: str, reporter: Reporter) -> None:
        try:
            self.client.delete(Service, name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                reporter.line(f"  Service {name} was already gone")
                return
            raise
        try:
            left = self.client.get(Service, name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                reporter.line(f"  deleted Service {name}")
                return
            raise
        held = list(left.metadata.finalizers or []) if left.metadata else []
        raise CleanupFailed(
            f"Service {name} is marked for deletion but still there, held by the finalizers "
            f"{', '.join(held) or '(none listed)'}; it routes until they are removed",
            f"remove the finalizers {', '.join(held)} from Service {name} in namespace "
            f"{self.namespace} (or have their controller finish), and it is deleted",
        )

    def delete_generation(
        self, clearance: Clearance, target: Target, generation: str, reporter: Reporter
    ) -> None:
        """Delete every object of the generation (its Deployments with their pods, Services,
        Secrets, ConfigMaps). The generation an Ingress routes to is refused."""
        self._guard(clearance, target)
        if not generation.strip():
            # without a name the label query would match every generation's objects
            raise InputError(f"which generation of {target} to delete? (none was named)")
        labels = self._gen_labels(generation)
        with self._edge(f"deleting generation {generation}"):
            served = self._routed_hosts(generation)
            if served:
                raise BackendError(
                    f"generation {generation} serves {', '.join(served)}: switch to another "
                    "one first"
                )
            found = 0
            for kind in ("Deployment", "Service", "ConfigMap", "Secret"):
                for obj in self.client.list(
                    RESOURCES[kind], namespace=self.namespace, labels=labels
                ):
                    self.client.delete(
                        RESOURCES[kind],
                        obj.metadata.name,
                        namespace=self.namespace,
                        cascade=CascadeType.BACKGROUND,
                    )
                    reporter.line(f"  deleted {kind} {obj.metadata.name}")
                    found += 1
        if not found:
            raise BackendError(f"no generation {generation} in {target}")
