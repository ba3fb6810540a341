"""The typed state of one app's slot in one namespace, and the edge every part crosses.

:class:`KubernetesState` is what every part of the backend (reads, steps, health, lock,
blue_green) derives from: the lightkube client and watch loop it opens lazily, the Lease it
holds while an operation runs, the secret values applied in this process (so no message
ever shows one), and the watches of the operation's waits. It inherits the one guard
preamble (:class:`~shipway.backends.guarded.Guarded`) and says, in ``_lock_problem``, when
its Lease is lost.

``_edge`` is the one place library errors (lightkube's ApiError, httpx's transport errors)
become shipway errors, most specific first, secret values masked; nothing outside this
package ever sees a library exception. Before an error gets there, the client has tried
the call again if it may be (:mod:`.retrying`: the shared retry policy, each retry said as
a line naming what ``_edge`` says the calls are for).
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx2
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import (
    ConfigMap,
    Event,
    Namespace,
    PersistentVolumeClaim,
    Pod,
    Service,
)
from lightkube.resources.core_v1 import Secret as SecretObject
from lightkube.resources.networking_v1 import Ingress
from lightkube.types import PatchType

from shipway.backends import retry
from shipway.backends.guarded import Guarded
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.client import load_config
from shipway.backends.kubernetes.lease import SlotLease
from shipway.backends.kubernetes.records import RecordStore
from shipway.backends.kubernetes.retrying import RetryingClient
from shipway.backends.kubernetes.rollout import Tuning
from shipway.backends.kubernetes.watch import Changes, LiveSet, WatchLoop
from shipway.backends.protocol import Reporter
from shipway.errors import BackendError, CleanupFailed, InputError
from shipway.spec.model import App, Slot
from shipway.spec.secrets import Masker, Secret, redact, resolve_all

if TYPE_CHECKING:
    from shipway.backends.kubernetes.source_slot import SourceSlot

RESOURCES: dict[str, type[Any]] = {
    "Namespace": Namespace,
    "Secret": SecretObject,
    "ConfigMap": ConfigMap,
    "Deployment": Deployment,
    "Service": Service,
    "Ingress": Ingress,
    "PersistentVolumeClaim": PersistentVolumeClaim,
}
# Who sets a generation's replicas (through the scale subresource): not the applier, so a
# later apply in that generation never reverts a scale.
SCALE_MANAGER = "shipway-scale"
#: what a failure shows: the most recent events, a pod's last log lines
EVENTS_SHOWN = 5
LOG_LINES = 10
#: how long the log of a container that has just ended may take to get its last lines, and
#: the pace of reading it again meanwhile (:meth:`KubernetesState._log_tail`)
LOG_SETTLE = 2.0
LOG_SETTLE_PACE = 0.25


def api_message(exc: ApiError) -> str:
    status = exc.status
    return f"{status.code} {status.reason or ''}: {status.message or exc}".replace(" :", ":")


def short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Session:
    """What one locked operation keeps: the watches of its rollout waits (and, one per
    generation, those of its replica waits)."""

    def __init__(self, changes: Changes, deployments: LiveSet, pods: LiveSet) -> None:
        self.changes = changes
        self.deployments = deployments
        self.pods = pods

    @property
    def dead(self) -> bool:
        return self.deployments.dead or self.pods.dead

    def stop(self) -> None:
        self.deployments.stop()
        self.pods.stop()


class KubernetesState(Guarded):
    """One app's slot in one namespace of one cluster: the connection, the held Lease, the
    secrets applied so far and the watches an operation's waits share."""

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
        #: how every call to the API server is tried again (the lock's renewals have their
        #: own, shorter budget; watches reopen with its back-off)
        self.retry = retry.RetryPolicy()
        self._client = RetryingClient(client, self.retry) if client is not None else None
        self._loop: WatchLoop | None = None
        self._session: Session | None = None
        self._generations: dict[str, int] = {}
        #: the uid each source object's apply returned: a replaced Job's wait judges the
        #: new Job, never the old one a watch may still hold
        self._uids: dict[str, str] = {}
        self._secrets: dict[str, Secret] = {}
        self._generation_watches: dict[str, Session] = {}
        # host -> the other owners host_owner named for it in this operation: the only
        # Ingresses point_host may take the host from (the engine asked, and allowed it)
        self._owners_seen: dict[str, list[tuple[str, str]]] = {}
        self._owner_scope: str | None = None
        # the slot's lock while an operation holds it, and the waits its loss must wake
        self.lease: SlotLease | None = None
        self._waiting: set[Changes] = set()
        # a destroy ran under the Lease: it is deleted once released (:mod:`.destroy`)
        self._lease_doomed = False
        self._source: SourceSlot | None = None

    @property
    def source(self) -> SourceSlot:
        """The source part: what a slot whose objects come from a source (manifests, a
        chart) does differently, and what any slot does with the source objects its
        history still holds (a slot that left its source prunes them). Every protocol
        method where that differs says so in one branch and calls it. Made on first use;
        it opens nothing until it reads."""
        if self._source is None:
            # imported here: the source part is given this state, and builds on its module
            from shipway.backends.kubernetes.source_slot import SourceSlot

            self._source = SourceSlot(self)
        return self._source

    # -- the connection ------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The lightkube client, every call retried as :mod:`.retrying` allows (typed Any:
        its overloads over resource classes do not survive our kind-by-name tables)."""
        if self._client is None:
            self._client = RetryingClient(
                Client(
                    config=load_config(self.slot.context),
                    namespace=self.namespace,
                    field_manager=render.MANAGER,
                ),
                self.retry,
            )
        return self._client

    def report_retries(self, reporter: Reporter) -> None:
        self.retry.reporter = reporter

    def _watch_loop(self) -> WatchLoop:
        if self._loop is None:
            self._loop = WatchLoop(self.client.config)
        return self._loop

    def close(self) -> None:
        if self._source is not None:
            self._source.end_session()
        self._stop_generation_watches()
        if self._session is not None:
            self._session.stop()
            self._session = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- the lock, as every mutation and wait sees it --------------------------------

    def _lock_problem(self) -> str | None:
        """Lost once a renewal found the Lease changed hands or gone, or when no renewal
        succeeded within its duration: another operation may own the slot now."""
        return self.lease.problem() if self.lease is not None else None

    def _wake_waits(self) -> None:
        for changes in list(self._waiting):
            changes.bump()

    @contextlib.contextmanager
    def _woken_on_lock_loss(self, changes: Changes) -> Iterator[None]:
        """For the block (a wait): losing the lock bumps ``changes``, so the wait looks at
        the lock at once instead of at its next event or deadline."""
        self._waiting.add(changes)
        try:
            yield
        finally:
            self._waiting.discard(changes)

    def _lock_wake(self, now: float) -> float | None:
        """When a wait must look at the lock again (it runs out then, unless renewed)."""
        left = self.lease.remaining() if self.lease is not None else None
        return None if left is None else now + max(0.0, left)

    # -- the edge ------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    @contextlib.contextmanager
    def _edge(self, doing: str, *, cleanup_fix: str | None = None) -> Iterator[None]:
        """Library errors become BackendError here, most specific first, values masked.
        With ``cleanup_fix`` (best-effort cleanup) they become CleanupFailed with that
        manual fix: reported, never failing the operation."""
        try:
            with retry.doing(doing):
                yield
        except ApiError as exc:
            message = self._redact(f"{doing}: {api_message(exc)}{retry.gave_up(exc)}")
            if cleanup_fix is not None:
                raise CleanupFailed(message, cleanup_fix) from exc
            raise BackendError(message) from exc
        except httpx2.HTTPError as exc:
            server = self.client.config.cluster.server if self._client else "the cluster"
            message = self._redact(
                f"{doing}: cannot reach {server}: {type(exc).__name__}: {exc}{retry.gave_up(exc)}"
            )
            if cleanup_fix is not None:
                raise CleanupFailed(message, cleanup_fix) from exc
            raise BackendError(message) from exc

    # -- what every part reads -------------------------------------------------------

    def _labels(self) -> dict[str, str]:
        return render.selector_labels(self.app.name, self.slot.name)

    def _store(self) -> RecordStore:
        return RecordStore(self.client, self.namespace, self.app.name)

    def _live(self, kind: str, name: str) -> Any:
        """The live object, or None when it is not there (or not ours to read)."""
        res = RESOURCES[kind]
        try:
            if kind == "Namespace":
                return self.client.get(res, name)
            return self.client.get(res, name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code in (403, 404):
                return None
            raise

    def _secret_values(self) -> list[str]:
        """Every secret value the slot's pods may print: those given to them (the env
        Secret), those applied in this process, those the spec resolves to here."""
        values = {v.reveal() for v in self._secrets.values()}
        with contextlib.suppress(ApiError, httpx2.HTTPError):
            # the slot's env Secret, and each generation's
            for env in self.client.list(
                SecretObject, namespace=self.namespace, labels=self._labels()
            ):
                generation = (env.metadata.labels or {}).get(render.GENERATION)
                if env.metadata.name != render.env_secret_name(self.app.name, generation):
                    continue
                data = env.data or {}
                values |= {
                    base64.b64decode(data[name]).decode(errors="replace")
                    for name in self.app.secrets
                    if name in data
                }
        with contextlib.suppress(InputError):
            values |= {v.reveal() for v in resolve_all(self.app.secrets).values()}
        return sorted(values)

    def _masker(self) -> Masker:
        """Masks every secret value the slot's pods may print (see ``_secret_values``):
        also those of the live env Secrets, when this operation applied none (a wake, a
        switch)."""
        return Masker(self._secret_values())

    # -- what a failure shows ------------------------------------------------------

    def _events(
        self, fields: Mapping[str, str], of: Callable[[str], bool] | None = None
    ) -> list[str]:
        """The most recent events matching ``fields`` (and, with ``of``, whose object's
        name it accepts)."""
        try:
            events = list(self.client.list(Event, namespace=self.namespace, fields=dict(fields)))
        except (ApiError, httpx2.HTTPError) as exc:
            return [f"events: unavailable ({exc})"]
        if of is not None:
            events = [e for e in events if of(str(e.involvedObject.name or ""))]

        def when(e: Any) -> str:
            t = e.lastTimestamp or e.eventTime or e.metadata.creationTimestamp
            return t.isoformat() if t else ""

        # One line per distinct event: the scheduler (events.k8s.io) records the same
        # FailedScheduling once per attempt, as separate objects; they are one thing said
        # again, so they are counted, not repeated.
        said: dict[tuple[str, ...], tuple[str, int]] = {}
        for e in sorted(events, key=when):
            obj = e.involvedObject
            key = (e.type or "", e.reason or "", obj.kind or "", obj.name or "", e.message or "")
            times = max(e.count or 1, (e.series.count if e.series else None) or 1)
            _, before = said.pop(key, ("", 0))
            said[key] = (when(e), before + times)  # re-inserted: ordered by the last one
        return [
            f"event {kind_of} {reason} ({kind} {name}{f', x{n}' if n > 1 else ''}): "
            f"{message.strip()}"
            for (kind_of, reason, kind, name, message), (_, n) in list(said.items())[-EVENTS_SHOWN:]
        ]

    def _log_tail(self, pod: str, container: str | None, *, ended: bool = False) -> list[str]:
        """The last :data:`LOG_LINES` lines of a container's log, each ``log: …``. Of a
        container that has just ``ended``, once its log has settled: the runtime copies its
        stdout and stderr into the log apart from telling its exit, and may tell the exit
        first — so the last lines (most often the error, on stderr) can be missing from a
        read at once. Settled: two reads one pace apart agree; at most :data:`LOG_SETTLE`
        seconds."""
        lines = self._log_lines(pod, container)
        deadline = time.monotonic() + LOG_SETTLE
        while ended and time.monotonic() < deadline:
            time.sleep(LOG_SETTLE_PACE)  # the pace of reading it again: nothing tells more
            again = self._log_lines(pod, container)
            if again == lines:
                break
            lines = again
        return lines

    def _log_lines(self, pod: str, container: str | None) -> list[str]:
        try:
            lines = list(
                self.client.log(
                    pod, namespace=self.namespace, container=container, tail_lines=LOG_LINES
                )
            )
        except ApiError as exc:
            return [f"log: none available ({short(api_message(exc))})"]
        except httpx2.HTTPError as exc:
            return [f"log: none available ({short(str(exc))})"]
        if not lines:
            return ["log: (empty)"]
        return [f"log: {line.rstrip()}" for line in lines]

    def _scale_to(self, name: str, replicas: int) -> None:
        """A Deployment's replicas, set where ``scale`` sets them (the scale subresource,
        under its own field manager)."""
        self.client.patch(
            Deployment.Scale,
            name,
            {"spec": {"replicas": replicas}},
            namespace=self.namespace,
            patch_type=PatchType.MERGE,
            field_manager=SCALE_MANAGER,
        )

    # -- the watches an operation's waits share --------------------------------------

    def _start_session(self) -> Session:
        """The operation's watches, opened once and shared by its waits — unless one of
        them died (an error no retry cures): then a new pair is opened for the next wait,
        never the dead stream shared, with what existed before the operation carried over
        (earlier exits of those pods are still not held against a release). A source
        slot's operation watches its source's pods too (the source part's)."""
        if self.slot.source is not None:
            self.source.start_session()
        if self._session is not None and self._session.dead:
            old = self._session
            old.stop()
            self._session = self._open_watches({}, carry=old)
        if self._session is None:
            self._session = self._open_watches({})
        return self._session

    def _open_watches(self, extra_labels: dict[str, str], carry: Session | None = None) -> Session:
        """One list and one watch each for this app and slot's Deployments and Pods (those
        with ``extra_labels`` too); nothing left open if the second fails to start."""
        loop = self._watch_loop()
        changes = Changes()
        labels = {
            render.NAME: self.app.name,
            render.INSTANCE: render.instance_of(self.app.name, self.slot.name),
            **extra_labels,
        }

        def live(resource: type[Any], before: LiveSet | None) -> LiveSet:
            return LiveSet(
                loop,
                resource,
                self.namespace,
                changes,
                labels=labels,
                policy=self.retry,
                initial=before.initial if before is not None else None,
            )

        deps = live(Deployment, carry.deployments if carry else None)
        pods = live(Pod, carry.pods if carry else None)
        deps.start()
        try:
            pods.start()
        except BaseException:
            deps.stop()
            raise
        return Session(changes, deps, pods)

    def _end_session(self) -> None:
        if self._source is not None:
            self._source.end_session()
        self._stop_generation_watches()
        self._owners_seen.clear()
        if self._session is not None:
            self._session.stop()
            self._session = None

    def _stop_generation_watches(self) -> None:
        for watches in self._generation_watches.values():
            watches.stop()
        self._generation_watches.clear()
