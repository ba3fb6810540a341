"""The typed state of one app's slot in one namespace, and the edge every part crosses.

:class:`KubernetesState` is what every part of the backend (reads, steps, health, lock,
blue_green) derives from: the lightkube client and watch loop it opens lazily, the Lease it
holds while an operation runs, the secret values applied in this process (so no message
ever shows one), and the watches of the operation's waits. It inherits the one guard
preamble (:class:`~shipway.backends.guarded.Guarded`) and says, in ``_lock_problem``, when
its Lease is lost.

``_edge`` is the one place library errors (lightkube's ApiError, httpx's transport errors)
become shipway errors, most specific first, secret values masked; nothing outside this
package ever sees a library exception.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from typing import Any

import httpx2
from lightkube import Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import (
    ConfigMap,
    Namespace,
    PersistentVolumeClaim,
    Pod,
    Service,
)
from lightkube.resources.core_v1 import Secret as SecretObject
from lightkube.resources.networking_v1 import Ingress
from lightkube.types import PatchType

from shipway.backends.guarded import Guarded
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.client import load_config
from shipway.backends.kubernetes.lease import SlotLease
from shipway.backends.kubernetes.records import RecordStore
from shipway.backends.kubernetes.rollout import Tuning
from shipway.backends.kubernetes.watch import Changes, LiveSet, WatchLoop
from shipway.errors import BackendError, CleanupFailed, InputError
from shipway.spec.model import App, Slot
from shipway.spec.secrets import Masker, Secret, redact, resolve_all

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
        self._client = client
        self._loop: WatchLoop | None = None
        self._session: Session | None = None
        self._generations: dict[str, int] = {}
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

    # -- the connection ------------------------------------------------------------

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
            yield
        except ApiError as exc:
            message = self._redact(f"{doing}: {api_message(exc)}")
            if cleanup_fix is not None:
                raise CleanupFailed(message, cleanup_fix) from exc
            raise BackendError(message) from exc
        except httpx2.HTTPError as exc:
            server = self.client.config.cluster.server if self._client else "the cluster"
            message = self._redact(f"{doing}: cannot reach {server}: {type(exc).__name__}: {exc}")
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
        if self._session is None:
            self._session = self._open_watches({})
        return self._session

    def _open_watches(self, extra_labels: dict[str, str]) -> Session:
        """One list and one watch each for this app and slot's Deployments and Pods (those
        with ``extra_labels`` too); nothing left open if the second fails to start."""
        loop = self._watch_loop()
        changes = Changes()
        labels = {
            render.NAME: self.app.name,
            render.INSTANCE: render.instance_of(self.app.name, self.slot.name),
            **extra_labels,
        }
        deps = LiveSet(loop, Deployment, self.namespace, changes, labels=labels)
        pods = LiveSet(loop, Pod, self.namespace, changes, labels=labels)
        deps.start()
        try:
            pods.start()
        except BaseException:
            deps.stop()
            raise
        return Session(changes, deps, pods)

    def _end_session(self) -> None:
        self._stop_generation_watches()
        self._owners_seen.clear()
        if self._session is not None:
            self._session.stop()
            self._session = None

    def _stop_generation_watches(self) -> None:
        for watches in self._generation_watches.values():
            watches.stop()
        self._generation_watches.clear()
