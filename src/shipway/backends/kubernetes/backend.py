"""The Kubernetes backend: render → server-side apply → watch → records in Secrets.

It does one step at a time when the engine asks and decides nothing itself. Library
errors (lightkube's ApiError, transport errors) become shipway errors here, at the edge,
with secret values masked. Every mutating method checks its clearance first.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import difflib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx2
import yaml
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import (
    ConfigMap,
    Event,
    Namespace,
    Pod,
    Service,
)
from lightkube.resources.core_v1 import Secret as SecretObject
from lightkube.resources.networking_v1 import Ingress
from lightkube.types import CascadeType

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.client import load_config
from shipway.backends.kubernetes.lease import SlotLease
from shipway.backends.kubernetes.records import RecordStore
from shipway.backends.kubernetes.rollout import (
    Judge,
    Signal,
    Tuning,
    Verdict,
    Watched,
    new_pods,
    readiness_window,
)
from shipway.backends.kubernetes.watch import Changes, LiveSet, WatchLoop
from shipway.backends.protocol import (
    Failure,
    LockHolder,
    ProcessStatus,
    Reporter,
    ResolvedImage,
)
from shipway.errors import BackendError, CleanupFailed, InputError
from shipway.guard import Clearance
from shipway.plan.model import (
    ApplyObject,
    DropHost,
    Observed,
    ObservedUnit,
    Plan,
    PointHost,
    Remove,
    Scale,
    UnitState,
    WaitReplicas,
    WaitRollout,
)
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import Release
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import MASK, Secret, redact, resolve_all, reveal

RESOURCES: dict[str, type[Any]] = {
    "Namespace": Namespace,
    "Secret": SecretObject,
    "ConfigMap": ConfigMap,
    "Deployment": Deployment,
    "Service": Service,
    "Ingress": Ingress,
}
# What ``observe`` lists (by label) and may prune, in the order it lists them.
OBSERVED_KINDS = ("Secret", "ConfigMap", "Deployment", "Service", "Ingress")
VOLATILE_METADATA = (
    "managedFields",
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "selfLink",
)
EVENTS_SHOWN = 5
LOG_LINES = 10


def _api_message(exc: ApiError) -> str:
    status = exc.status
    return f"{status.code} {status.reason or ''}: {status.message or exc}".replace(" :", ":")


class _Session:
    """What one locked operation keeps: the watches of its rollout waits."""

    def __init__(self, changes: Changes, deployments: LiveSet, pods: LiveSet) -> None:
        self.changes = changes
        self.deployments = deployments
        self.pods = pods

    def stop(self) -> None:
        self.deployments.stop()
        self.pods.stop()


class KubernetesBackend:
    """One app's slot in one namespace of one cluster."""

    name = "kubernetes"

    def __init__(
        self,
        app: App,
        slot: Slot,
        *,
        tuning: Tuning | None = None,
        client: Client | None = None,
    ) -> None:
        self.app = app
        self.slot = slot
        self.namespace = slot.namespace or render.instance_of(app.name, slot.name)
        self.tuning = tuning or Tuning()
        self._client = client
        self._loop: WatchLoop | None = None
        self._session: _Session | None = None
        self._generations: dict[str, int] = {}
        self._secrets: dict[str, Secret] = {}

    # -- plumbing ---------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The lightkube client (typed Any: its overloads over resource classes do not
        survive our kind-by-name tables)."""
        if self._client is None:
            self._client = Client(
                config=load_config(self.slot.context),
                namespace=self.namespace,
                field_manager=render.MANAGER,
            )
        return self._client

    def _watch_loop(self) -> WatchLoop:
        if self._loop is None:
            self._loop = WatchLoop(self.client.config)
        return self._loop

    def close(self) -> None:
        if self._session is not None:
            self._session.stop()
            self._session = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def _check(self, target: Target) -> None:
        if (target.app, target.slot) != (self.app.name, self.slot.name):
            raise BackendError(
                f"this backend is connected to {self.app.name}/{self.slot.name}, not {target}"
            )

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    @contextlib.contextmanager
    def _edge(self, doing: str) -> Iterator[None]:
        """Library errors become BackendError here, most specific first, values masked."""
        try:
            yield
        except ApiError as exc:
            raise BackendError(self._redact(f"{doing}: {_api_message(exc)}")) from exc
        except httpx2.HTTPError as exc:
            server = self.client.config.cluster.server if self._client else "the cluster"
            raise BackendError(
                self._redact(f"{doing}: cannot reach {server}: {type(exc).__name__}: {exc}")
            ) from exc

    def _labels(self) -> dict[str, str]:
        return render.selector_labels(self.app.name, self.slot.name)

    # -- pure -------------------------------------------------------------------------

    def render(self, app: App, slot: Slot, release: Release) -> Artifact:
        return render.render(app, slot, release)

    # -- reading ----------------------------------------------------------------------

    def resolve_image(self, target: Target, app: App, ref: str | None) -> ResolvedImage:
        chosen = ref or app.image
        if not chosen:
            raise InputError(
                f"slot {target.slot!r} runs on Kubernetes and needs an image "
                '(hint: set app.image = "registry/app:tag" in the spec, or pass --image)'
            )
        from shipway.backends.kubernetes import image

        return image.resolve(chosen)

    def observe(self, target: Target) -> Observed:
        self._check(target)
        units: list[ObservedUnit] = []
        namespace = self._observe_namespace()
        if namespace is not None:
            units.append(namespace)
        with self._edge(f"listing the objects of {target} in namespace {self.namespace}"):
            for kind in OBSERVED_KINDS:
                for obj in self.client.list(
                    RESOURCES[kind], namespace=self.namespace, labels=self._labels()
                ):
                    meta = obj.metadata
                    units.append(
                        ObservedUnit(
                            key=render.unit_key(kind, meta.name),
                            kind=kind,
                            digest=(meta.annotations or {}).get(render.DIGEST),
                            state=_state(kind, obj),
                            process=(meta.labels or {}).get(render.COMPONENT),
                            phase=render.PHASES[kind],
                        )
                    )
        return Observed.of(units)

    def _observe_namespace(self) -> ObservedUnit | None:
        unit = render.namespace_unit(self.namespace)
        try:
            ns = self.client.get(Namespace, self.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            if exc.status.code == 403:
                # A namespace-scoped identity cannot read its Namespace; it exists (that
                # identity was granted rights in it) and is someone else's to manage.
                return ObservedUnit(unit.key, "Namespace", unit.digest, "present", phase=0)
            raise BackendError(f"reading namespace {self.namespace}: {_api_message(exc)}") from exc
        except httpx2.HTTPError as exc:
            raise BackendError(f"reading namespace {self.namespace}: {exc}") from exc
        digest = (ns.metadata.annotations or {}).get(render.DIGEST) if ns.metadata else None
        return ObservedUnit(unit.key, "Namespace", digest, "present", phase=0)

    def _store(self) -> RecordStore:
        return RecordStore(self.client, self.namespace, self.app.name)

    def read_records(self, target: Target) -> list[Release]:
        self._check(target)
        with self._edge(f"reading the release records of {target}"):
            return self._store().read()

    def status(self, target: Target) -> list[ProcessStatus]:
        self._check(target)
        out = []
        with self._edge(f"reading the Deployments of {target}"):
            deployments = list(
                self.client.list(Deployment, namespace=self.namespace, labels=self._labels())
            )
        for dep in deployments:
            d = dep.to_dict()
            spec, st = d.get("spec", {}), d.get("status") or {}
            process = d["metadata"].get("labels", {}).get(render.COMPONENT, d["metadata"]["name"])
            annotations = spec.get("template", {}).get("metadata", {}).get("annotations", {})
            out.append(
                ProcessStatus(
                    process=process,
                    desired=spec.get("replicas", 0),
                    ready=st.get("readyReplicas", 0),
                    detail={
                        "updated": st.get("updatedReplicas", 0),
                        "available": st.get("availableReplicas", 0),
                        "deployment_id": annotations.get(render.DEPLOYMENT_ID),
                        "image": spec.get("template", {})
                        .get("spec", {})
                        .get("containers", [{}])[0]
                        .get("image"),
                    },
                )
            )
        return sorted(out, key=lambda s: s.process)

    def diff(self, target: Target, plan: Plan) -> list[str]:
        """How each object the plan applies would change, from a server-side dry run;
        Secret values masked. Read-only."""
        self._check(target)
        if plan.release is None:
            return []
        lines: list[str] = []
        for step in plan.steps:
            if isinstance(step, ApplyObject):
                lines += self._diff_apply(plan.release.artifact.get(step.unit))
            elif isinstance(step, Remove):
                lines.append(f"- {step.unit} (would be removed: {step.reason})")
        return lines

    def _live(self, kind: str, name: str) -> Any:
        res = RESOURCES[kind]
        try:
            if kind == "Namespace":
                return self.client.get(res, name)
            return self.client.get(res, name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code in (403, 404):
                return None
            raise

    def _diff_apply(self, unit: Unit) -> list[str]:
        kind, name = render.split_key(unit.key)
        with self._edge(f"diffing {unit.key}"):
            live = self._live(kind, name)
            desired = _with_digest(unit)
            if live is None:
                return [f"+ {unit.key} (new)", *_indent(_yaml(_masked(desired)), "+   ")]
            before = _comparable(live.to_dict())
            if kind == "Secret":
                return [f"~ {unit.key}", *_secret_diff(before, desired)]
            merged = self.client.apply(from_dict(desired), force=True, dry_run=True)
            after = _comparable(merged.to_dict())
        out = list(
            difflib.unified_diff(
                _yaml(before).splitlines(),
                _yaml(after).splitlines(),
                fromfile=f"{unit.key} (live)",
                tofile=f"{unit.key} (planned)",
                lineterm="",
                n=2,
            )
        )
        return [f"~ {unit.key}", *_indent(out[2:], "    ")] if out else [f"= {unit.key}"]

    def _secret_values(self) -> list[str]:
        """Every secret value the slot's pods may print: those given to them (the env
        Secret), those applied in this process, those the spec resolves to here."""
        values = {v.reveal() for v in self._secrets.values()}
        with contextlib.suppress(ApiError, httpx2.HTTPError):
            env = self.client.get(
                SecretObject, render.env_secret_name(self.app.name), namespace=self.namespace
            )
            data = env.data or {}
            values |= {
                base64.b64decode(data[name]).decode(errors="replace")
                for name in self.app.secrets
                if name in data
            }
        with contextlib.suppress(InputError):
            values |= {v.reveal() for v in resolve_all(self.app.secrets).values()}
        return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)

    def logs(self, target: Target, process: str | None, follow: bool, lines: int) -> Iterator[str]:
        self._check(target)
        values = self._secret_values()

        def masked(text: str) -> str:
            for value in values:
                text = text.replace(value, MASK)
            return text

        labels = self._labels()
        if process:
            labels[render.COMPONENT] = process
        with self._edge(f"listing the pods of {target}"):
            pods = [
                p.metadata.name
                for p in self.client.list(Pod, namespace=self.namespace, labels=labels)
            ]
        for pod in pods if not follow else pods[:1]:
            try:
                for line in self.client.log(
                    pod, namespace=self.namespace, tail_lines=lines, follow=follow
                ):
                    yield masked(f"{pod}: {line.rstrip()}")
            except ApiError as exc:
                yield masked(f"{pod}: no logs: {_short(_api_message(exc))}")
            except httpx2.HTTPError as exc:
                yield masked(f"{pod}: no logs: {_short(str(exc))}")

    def live_digest(self, target: Target, release: Release) -> str | None:
        """The digest the Deployments run: from their image references (shipway pins them
        to the digest), else from the running containers' image IDs."""
        self._check(target)
        with self._edge(f"reading the Deployments of {target}"):
            deployments = list(
                self.client.list(Deployment, namespace=self.namespace, labels=self._labels())
            )
            digests: set[str] = set()
            for dep in deployments:
                for c in dep.spec.template.spec.containers if dep.spec else []:
                    if c.image and "@" in c.image:
                        digests.add(str(c.image).split("@", 1)[1])
            if not digests and deployments:
                for pod in self.client.list(Pod, namespace=self.namespace, labels=self._labels()):
                    for cs in (pod.status.containerStatuses or []) if pod.status else []:
                        if cs.imageID and "@" in cs.imageID:
                            digests.add(str(cs.imageID).split("@", 1)[1])
        if not digests:
            return None
        if len(digests) == 1:
            return digests.pop()
        others = sorted(d for d in digests if d != release.digest)
        return others[0]

    # -- the lock ---------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(
        self, clearance: Clearance, target: Target, holder: LockHolder, reporter: Reporter
    ) -> Iterator[None]:
        clearance.require_covers(target)
        self._check(target)
        lease = SlotLease(
            self.client,
            self.namespace,
            self.app.name,
            self.slot.name,
            holder,
            reporter,
            ensure_namespace=lambda: self._ensure_namespace(reporter),
            renew_client=lambda: Client(
                config=self.client.config, namespace=self.namespace, field_manager=render.MANAGER
            ),
        )
        with self._edge(f"taking the lock of {target}"):
            lease.acquire()
        try:
            lease.start_renewing()
            # Watch from before the first apply: pods that exist now are the old ones,
            # and exits they had before this operation are not held against them.
            with self._edge(f"watching the workloads of {target}"):
                self._start_session()
            yield
        finally:
            self._end_session()
            try:
                lease.release()
            except (ApiError, httpx2.HTTPError) as exc:
                reporter.line(
                    f"warning: releasing the lock of {target} failed ({exc}); it expires by "
                    f"itself at the latest {holder.ttl:g}s after its last renewal"
                )

    def _ensure_namespace(self, reporter: Reporter) -> None:
        body = render.namespace_unit(self.namespace)
        with self._edge(f"creating namespace {self.namespace}"):
            self.client.apply(from_dict(_with_digest(body)), force=True)
        reporter.line(f"created namespace {self.namespace}")

    def _start_session(self) -> _Session:
        if self._session is None:
            loop = self._watch_loop()
            changes = Changes()
            labels = {
                render.NAME: self.app.name,
                render.INSTANCE: render.instance_of(self.app.name, self.slot.name),
            }
            deps = LiveSet(loop, Deployment, self.namespace, changes, labels=labels)
            pods = LiveSet(loop, Pod, self.namespace, changes, labels=labels)
            deps.start()
            try:
                pods.start()
            except BaseException:
                deps.stop()
                raise
            self._session = _Session(changes, deps, pods)
        return self._session

    def _end_session(self) -> None:
        if self._session is not None:
            self._session.stop()
            self._session = None

    # -- records ----------------------------------------------------------------------

    def write_records(
        self, clearance: Clearance, target: Target, records: Sequence[Release]
    ) -> None:
        clearance.require_covers(target)
        self._check(target)
        with self._edge(f"writing the release records of {target}"):
            self._store().write(records)

    def delete_records(
        self, clearance: Clearance, target: Target, revisions: Sequence[int]
    ) -> None:
        clearance.require_covers(target)
        self._check(target)
        with self._edge(f"deleting old release records of {target}"):
            self._store().delete(revisions)

    # -- applying ---------------------------------------------------------------------

    def apply(
        self,
        clearance: Clearance,
        target: Target,
        unit: Unit,
        action: str,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> None:
        clearance.require_covers(target)
        self._check(target)
        self._secrets.update(secrets)
        body = _manifest(unit, secrets)
        with self._edge(f"applying {unit.key}"):
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
        if unit.kind == "Deployment" and applied.metadata is not None:
            self._generations[unit.key] = int(applied.metadata.generation or 0)

    def remove(
        self, clearance: Clearance, target: Target, step: Remove, reporter: Reporter
    ) -> None:
        clearance.require_covers(target)
        self._check(target)
        kind, name = render.split_key(step.unit)
        if kind == "Namespace" or kind not in RESOURCES:
            raise CleanupFailed(
                f"{step.unit} is not removed by shipway",
                f"delete {step.unit} yourself if it is no longer needed",
            )
        try:
            self.client.delete(
                RESOURCES[kind], name, namespace=self.namespace, cascade=CascadeType.BACKGROUND
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return
            raise CleanupFailed(
                f"removing {step.unit}: {_api_message(exc)}",
                f"delete {kind} {name} in namespace {self.namespace}",
            ) from exc
        except httpx2.HTTPError as exc:
            raise CleanupFailed(
                f"removing {step.unit}: {exc}",
                f"delete {kind} {name} in namespace {self.namespace}",
            ) from exc

    # -- waiting ----------------------------------------------------------------------

    def _watched(self, unit: Unit) -> Watched:
        body = unit.body
        template = body["spec"]["template"]["metadata"]["annotations"][render.TEMPLATE]
        return Watched(
            process=unit.process or body["metadata"]["name"],
            deployment=body["metadata"]["name"],
            template=template,
            replicas=body["spec"].get("replicas", 1),
            generation=self._generations.get(unit.key),
            readiness_window=readiness_window(body, self.tuning),
        )

    def wait(
        self,
        target: Target,
        step: WaitRollout,
        artifact: Artifact,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        self._check(target)
        units = [artifact.get(k) for k in step.units]
        watched = [self._watched(u) for u in units if u.kind == "Deployment"]
        if not watched:
            return None
        temporary = self._session is None
        with self._edge(f"watching the rollout of {step.process}"):
            session = self._start_session()
        try:
            return self._wait(session, step.process, watched, deadline, reporter)
        finally:
            if temporary:
                self._end_session()

    def _wait(
        self,
        session: _Session,
        process: str,
        watched: list[Watched],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        judges = [Judge(w, self.tuning, session.pods.initial) for w in watched]
        started = time.monotonic()
        version = -1
        while True:
            with session.changes.cond:
                version = session.changes.version
                deployments = dict(session.deployments.objects)
                pods = list(session.pods.objects.values())
            for live in (session.deployments, session.pods):
                if live.error:
                    raise BackendError(f"watching {live.what} in {self.namespace}: {live.error}")
            now = time.monotonic()
            verdicts = [j.assess(deployments.get(j.watched.deployment), pods, now) for j in judges]
            for v in verdicts:
                reporter.progress(process, v.counts.to_dict(), v.note)
            failed = next((v for v in verdicts if v.failure is not None), None)
            if failed is not None:
                assert failed.failure is not None
                return self._failure(process, failed.failure, watched)
            if all(v.done for v in verdicts):
                return None
            if now >= deadline:
                return self._timeout(process, verdicts, watched, now - started, pods)
            wake = min([deadline, *(v.recheck_at for v in verdicts if v.recheck_at)])
            session.changes.wait_past(version, wake - now)

    def _timeout(
        self,
        process: str,
        verdicts: list[Verdict],
        watched: list[Watched],
        waited: float,
        pods: list[dict[str, Any]],
    ) -> Failure:
        pending = [(w, v) for w, v in zip(watched, verdicts, strict=True) if not v.done]
        notes = "; ".join(
            f"{w.deployment}: "
            + " ".join(f"{k} {n}" for k, n in v.counts.to_dict().items())
            + (f" ({v.note})" if v.note else "")
            for w, v in pending
        )
        first = pending[0][0] if pending else watched[0]
        details = self._events_of_deployment(first.deployment)
        unready = [p for p in new_pods(pods, first) if not _ready(p)]
        if unready:
            name = unready[0]["metadata"]["name"]
            details += self._events({"involvedObject.name": name})
        return Failure(
            reason="Timeout",
            message=f"not ready after {waited:.0f}s: {notes}",
            process=process,
            details=tuple(details),
        )

    def _failure(self, process: str, signal: Signal, watched: list[Watched]) -> Failure:
        details: list[str] = []
        if signal.pod:
            details += self._events(fields={"involvedObject.name": signal.pod})
            details += self._log_tail(signal.pod, signal.container)
        else:
            details += self._events_of_deployment(watched[0].deployment)
        return Failure(
            reason=signal.reason,
            message=self._redact((f"pod {signal.pod}: " if signal.pod else "") + signal.message),
            process=process,
            exit_code=signal.exit_code,
            details=tuple(self._redact(d) for d in details),
        )

    def _events(self, fields: Mapping[str, str], prefix: str | None = None) -> list[str]:
        try:
            events = list(self.client.list(Event, namespace=self.namespace, fields=dict(fields)))
        except (ApiError, httpx2.HTTPError) as exc:
            return [f"events: unavailable ({exc})"]
        if prefix is not None:
            events = [e for e in events if e.involvedObject.name.startswith(prefix)]

        def when(e: Any) -> str:
            t = e.lastTimestamp or e.eventTime or e.metadata.creationTimestamp
            return t.isoformat() if t else ""

        events.sort(key=when)
        return [
            f"event {e.type or ''} {e.reason or ''} ({e.involvedObject.kind} "
            f"{e.involvedObject.name}{f', x{e.count}' if e.count and e.count > 1 else ''}): "
            f"{(e.message or '').strip()}"
            for e in events[-EVENTS_SHOWN:]
        ]

    def _events_of_deployment(self, deployment: str) -> list[str]:
        return self._events(
            {"involvedObject.kind": "ReplicaSet"}, prefix=f"{deployment}-"
        ) + self._events({"involvedObject.name": deployment})

    def _log_tail(self, pod: str, container: str | None) -> list[str]:
        try:
            lines = list(
                self.client.log(
                    pod, namespace=self.namespace, container=container, tail_lines=LOG_LINES
                )
            )
        except ApiError as exc:
            return [f"log: none available ({_short(_api_message(exc))})"]
        except httpx2.HTTPError as exc:
            return [f"log: none available ({_short(str(exc))})"]
        if not lines:
            return ["log: (empty)"]
        return [f"log: {line.rstrip()}" for line in lines]

    # -- the release command --------------------------------------------------------------

    def run_release_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        command: Sequence[str],
        secrets: Mapping[str, Secret],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        clearance.require_covers(target)
        self._check(target)
        self._secrets.update(secrets)
        body = render.release_job(release, self.namespace, list(command))
        name = body["metadata"]["name"]
        with self._edge(f"starting the release command (Job {name})"):
            self.client.apply(from_dict(body), force=True)
        changes = Changes()
        jobs = LiveSet(
            self._watch_loop(), Job, self.namespace, changes, fields={"metadata.name": name}
        )
        with self._edge(f"watching Job {name}"):
            jobs.start()
        try:
            while True:
                with changes.cond:
                    version = changes.version
                    job = jobs.objects.get(name)
                if jobs.error:
                    raise BackendError(f"watching Job {name}: {jobs.error}")
                conditions = {
                    c.get("type"): c
                    for c in ((job or {}).get("status") or {}).get("conditions") or []
                }
                if conditions.get("Complete", {}).get("status") == "True":
                    return None
                failed = conditions.get("Failed", {})
                if failed.get("status") == "True":
                    return self._job_failure(name, failed)
                now = time.monotonic()
                if now >= deadline:
                    return Failure(
                        reason="Timeout",
                        message=f"the release command (Job {name}) did not finish in time",
                        details=tuple(self._events({"involvedObject.name": name})),
                    )
                changes.wait_past(version, deadline - now)
        finally:
            jobs.stop()

    def _job_failure(self, name: str, condition: Mapping[str, Any]) -> Failure:
        details: list[str] = []
        exit_code = None
        try:
            pods = list(self.client.list(Pod, namespace=self.namespace, labels={"job-name": name}))
        except (ApiError, httpx2.HTTPError):
            pods = []
        for pod in pods[:1]:
            for cs in (pod.status.containerStatuses or []) if pod.status else []:
                term = cs.state.terminated if cs.state else None
                if term is not None:
                    exit_code = term.exitCode
            details += self._events({"involvedObject.name": pod.metadata.name})
            details += self._log_tail(pod.metadata.name, "release")
        return Failure(
            reason="ReleaseCommandFailed",
            message=self._redact(
                f"Job {name}: {condition.get('reason', 'Failed')}: {condition.get('message', '')}"
            ).rstrip(": "),
            exit_code=exit_code,
            details=tuple(self._redact(d) for d in details),
        )

    # -- generations (blue/green) are not a Kubernetes strategy here ------------------

    def _no_generations(self) -> BackendError:
        return BackendError(
            "blue-green generations are not supported by the kubernetes backend "
            '(hint: use strategy = "rolling"; a Deployment rolls without downtime)'
        )

    def scale(self, clearance: Clearance, target: Target, step: Scale, reporter: Reporter) -> None:
        clearance.require_covers(target)
        raise self._no_generations()

    def wait_replicas(
        self, target: Target, step: WaitReplicas, deadline: float, reporter: Reporter
    ) -> Failure | None:
        raise self._no_generations()

    def point_host(
        self, clearance: Clearance, target: Target, step: PointHost, reporter: Reporter
    ) -> None:
        clearance.require_covers(target)
        raise self._no_generations()

    def drop_host(
        self, clearance: Clearance, target: Target, step: DropHost, reporter: Reporter
    ) -> None:
        clearance.require_covers(target)
        raise self._no_generations()

    def stop(self, clearance: Clearance, target: Target, reporter: Reporter) -> None:
        """Scale every process of the slot to zero (records and objects stay)."""
        clearance.require_covers(target)
        self._check(target)
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


# -- manifests and diffs (pure helpers) ------------------------------------------------


def _state(kind: str, obj: Any) -> UnitState:
    """A Deployment scaled to zero (``shipway stop``) is stopped: the next rollout applies
    it again (``start``) even where nothing else changed."""
    if kind != "Deployment":
        return "present"
    return "stopped" if obj.spec is not None and obj.spec.replicas == 0 else "running"


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _with_digest(unit: Unit) -> dict[str, Any]:
    body = copy.deepcopy(dict(unit.body))
    meta = body.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), render.DIGEST: unit.digest}
    return body


def _manifest(unit: Unit, secrets: Mapping[str, Secret]) -> dict[str, Any]:
    """What is sent: placeholders replaced by values, Secret ``stringData`` as ``data``
    (server-side apply tracks ``data``; fields applied as stringData could never be
    removed again), the unit digest as an annotation."""
    body: dict[str, Any] = reveal(_with_digest(unit), secrets)
    if body.get("kind") == "Secret" and "stringData" in body:
        data = body.pop("stringData")
        body["data"] = {k: base64.b64encode(str(v).encode()).decode() for k, v in data.items()}
    return body


def _comparable(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    meta = out.get("metadata", {})
    for key in VOLATILE_METADATA:
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    annotations.pop("deployment.kubernetes.io/revision", None)
    if not annotations:
        meta.pop("annotations", None)
    return out


def _masked(body: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(body))
    if out.get("kind") == "Secret":
        for key in ("data", "stringData"):
            if key in out:
                out[key] = {k: MASK for k in out[key]}
    return out


def _secret_diff(live: Mapping[str, Any], desired: Mapping[str, Any]) -> list[str]:
    """Key by key, values never shown: added, removed, changed (when it can be told
    without a secret value), and the config hash, which moves when any value does."""
    before = {
        k: base64.b64decode(v).decode(errors="replace") for k, v in (live.get("data") or {}).items()
    }
    after = dict(desired.get("stringData") or desired.get("data") or {})
    lines = []
    for key in sorted(set(before) | set(after)):
        if key not in before:
            lines.append(f"    + {key}: {MASK}")
        elif key not in after:
            lines.append(f"    - {key}: {MASK}")
        elif "${secrets." not in str(after[key]) and before[key] != after[key]:
            lines.append(f"    ~ {key}: {MASK} (changed)")
    old_hash = (live.get("metadata", {}).get("annotations") or {}).get(render.CONFIG_HASH)
    new_hash = (desired.get("metadata", {}).get("annotations") or {}).get(render.CONFIG_HASH)
    if old_hash != new_hash:
        lines.append(f"    config hash {old_hash} -> {new_hash} (env, files or a secret value)")
    return lines or ["    (no change to keys or values)"]


def _yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False)


def _indent(lines: Sequence[str] | str, prefix: str) -> list[str]:
    if isinstance(lines, str):
        lines = lines.splitlines()
    return [prefix + line for line in lines]
