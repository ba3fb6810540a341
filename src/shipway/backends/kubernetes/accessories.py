"""The slot's accessories in its namespace: each one a StatefulSet of one pod with a claim
for its data, a ClusterIP Service in front of it, its credentials in a Secret.

    StatefulSet/<app>-acc-<name>     the official image of its kind and major version (or
                                     the same name under $SHIPWAY_ACCESSORY_MIRROR), its
                                     declaration in annotations (digest and JSON), ready when
                                     its port accepts connections
    PersistentVolumeClaim/data-<app>-acc-<name>-0   its data (``size``; default 1Gi), made
                                     by the StatefulSet's claim template and kept by it
    Service/<app>-acc-<name>         ClusterIP only: reachable inside the cluster, never
                                     published outside it
    Secret/<app>-acc-<name>          its password and database, made once (created, never
                                     replaced: of two creators the second reads the first's)

Every object carries the app's name and instance labels and ``managed-by:
shipway-accessory``, not ``shipway``: the app's observe, plans and removals list shipway's
own objects by that label, so no app operation ever sees, replaces or removes an
accessory's (invariant 16); only :meth:`start_accessory` applies them, and only ``destroy``
deletes them (the claim only with ``--volumes``).

The app's link names the Service's ClusterIP, not its DNS name: it is fixed for the
Service's life and needs no cluster DNS (which a cluster may lack: the test plane's real
node has none).
"""

from __future__ import annotations

import base64
import json
import os
import secrets as _random
import time
from collections.abc import Mapping
from typing import Any

from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import Namespace, PersistentVolumeClaim, Pod, Service
from lightkube.resources.core_v1 import Secret as SecretObject
from lightkube.types import CascadeType

from shipway.backends.accessories import (
    PG_USER,
    SERVER_PORTS,
    AccessoryStatus,
    Credentials,
    link_name,
    server_image,
)
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.state import KubernetesState
from shipway.backends.protocol import Failure, Leftover, Reason, Reporter
from shipway.guard import Clearance
from shipway.plan.model import StartAccessory
from shipway.spec.accessories import Accessory, from_json
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Secret

MANAGER = "shipway-accessory"
ACCESSORY = "shipway.io/accessory"
DECLARED = "shipway.io/declaration"
#: on an upgraded accessory's Secret: the claim's directory its data is in (the name is
#: from when only Postgres was upgraded)
PGDATA_NOTE = "shipway.io/pgdata"
DEFAULT_SIZE = "1Gi"
START_LIMIT = 300.0
LOOK = 0.5
#: where each kind keeps its data in the official images (Postgres in a directory of the
#: claim: a fresh volume's root may hold lost+found, which initdb refuses)
DATA_DIRS = {"postgres": "/var/lib/postgresql/data", "redis": "/data"}


def object_name(app: str, name: str) -> str:
    return f"{app}-acc-{name}"


def pg_data(sts: Any) -> str | None:
    """The PGDATA a live StatefulSet's server runs with (kept when it is applied again),
    or None (none live, or not a Postgres one)."""
    containers = sts.spec.template.spec.containers if sts is not None and sts.spec else []
    for c in containers or []:
        for e in c.env or []:
            if e.name == "PGDATA" and e.value:
                return str(e.value)
    return None


def data_dir(sts: Any) -> str | None:
    """The directory of the claim a live StatefulSet's server keeps its data in when it is
    not the default: Postgres' PGDATA (:func:`pg_data`), Redis' ``--dir`` (``redisN``
    after an upgrade to major N); None otherwise."""
    found = pg_data(sts)
    containers = sts.spec.template.spec.containers if sts is not None and sts.spec else []
    for c in containers or []:
        words = list(c.args or [])
        found = next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "--dir"), found)
    return found


#: an upgrade's new Redis data directory (``$0``) made ready for a server started with the
#: append-only file on: the snapshot there loaded by the new image's server with it off (on
#: loopback, another port), the file turned on and rewritten, the server stopped. Nothing to
#: do when the directory holds an append-only file already (every start after the first).
REDIS_LOAD = r"""
set -eu
d="$0"
if [ -e "$d/appendonlydir" ] || [ -e "$d/appendonly.aof" ] || [ ! -e "$d/dump.rdb" ]; then
  exit 0
fi
redis-server --port 6390 --bind 127.0.0.1 --protected-mode no --dir "$d" --appendonly no \
  --save "" --daemonize yes --pidfile /tmp/loader.pid --logfile /tmp/loader.log
until [ "$(redis-cli -p 6390 PING 2>/dev/null)" = PONG ]; do
  if [ -s /tmp/loader.pid ] && ! kill -0 "$(cat /tmp/loader.pid)" 2>/dev/null; then
    echo "redis-server did not load the snapshot: $(tail -n 4 /tmp/loader.log)" >&2
    exit 1
  fi
  sleep 0.1
done
info() { redis-cli -p 6390 INFO persistence | tr -d '\r' | grep "^$1:" | cut -d: -f2; }
[ "$(redis-cli -p 6390 CONFIG SET appendonly yes)" = OK ]
until [ "$(info aof_enabled)" = 1 ] && [ "$(info aof_rewrite_in_progress)" = 0 ] \
  && [ "$(info aof_rewrite_scheduled)" = 0 ]; do sleep 0.1; done
echo "loaded the snapshot: $(redis-cli -p 6390 DBSIZE) keys" >&2
redis-cli -p 6390 SHUTDOWN NOSAVE >/dev/null 2>&1 || true
"""


class KubernetesAccessories(KubernetesState):
    """The protocol's Accessories (:mod:`shipway.backends.accessories`)."""

    def _accessory_labels(self, name: str | None = None) -> dict[str, str]:
        out = {
            render.NAME: self.app.name,
            render.INSTANCE: render.instance_of(self.app.name, self.slot.name),
            render.MANAGED_BY: MANAGER,
        }
        return {**out, ACCESSORY: name} if name is not None else out

    # -- reads -------------------------------------------------------------------------

    def accessory_problems(self, app: App, slot: Slot) -> list[str]:
        return [
            f"{app.spec_file.name}: accessories.{a.name}: kubernetes runs postgres and redis"
            for a in app.accessories.values()
            if a.kind == "custom"
        ]

    def accessories(self, target: Target) -> list[AccessoryStatus]:
        self._serves(target)
        with self._edge(f"listing the accessories of {target}"):
            return [self._accessory_status(s) for s in self._listed(StatefulSet)]

    def _listed(self, res: type[Any]) -> list[Any]:
        """The slot's accessories' objects of one kind. An identity that may not list them
        (a role written before accessories), for an app that declares none, has none."""
        try:
            return list(
                self.client.list(res, namespace=self.namespace, labels=self._accessory_labels())
            )
        except ApiError as exc:
            if exc.status.code == 403 and not self.app.accessories:
                return []
            raise

    def _accessory_status(self, sts: Any) -> AccessoryStatus:
        meta = sts.metadata
        name = str((meta.labels or {}).get(ACCESSORY))
        notes = meta.annotations or {}
        declared: dict[str, Any] = json.loads(notes.get(DECLARED) or "{}")
        kind = str(declared.get("kind", "custom"))
        status = sts.status
        ready = bool(status and (status.readyReplicas or 0) >= 1)
        current = bool(status and status.currentRevision == status.updateRevision)
        wanted = sts.spec.replicas if sts.spec and sts.spec.replicas is not None else 1
        healthy = ready and current
        state = "running" if healthy else "starting" if wanted else "down"
        service = self._service(name)
        ip = service.spec.clusterIP if service is not None and service.spec else None
        return AccessoryStatus(
            name=name,
            kind=kind,
            version=declared.get("version"),
            state=state,
            healthy=healthy,
            digest=notes.get(render.DIGEST),
            declared=declared,
            address=f"{ip}:{SERVER_PORTS.get(kind)}" if ip else None,
            data_path=f"PersistentVolumeClaim/data-{meta.name}-0",
        )

    def _service(self, name: str) -> Any:
        return self._accessory_object(Service, name)

    def _accessory_object(self, res: type[Any], name: str) -> Any:
        """The accessory ``name``'s object of kind ``res``, or None when there is none."""
        try:
            return self.client.get(res, object_name(self.app.name, name), namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    def accessory_links(
        self, target: Target, declared: Mapping[str, Accessory], clearance: Clearance | None
    ) -> dict[str, Secret]:
        if clearance is not None:
            self._guard(clearance, target)
        else:
            self._serves(target)
        out: dict[str, Secret] = {}
        if clearance is not None and declared:
            with self._edge(f"namespace {self.namespace}"):
                self._namespace_made()
        for name, accessory in declared.items():
            if accessory.kind == "custom":
                continue
            with self._edge(f"the credentials of accessory {name} in {target}"):
                creds = self._credentials(accessory, clearance is not None)
                service = self._service(name)
                if service is None and clearance is not None:
                    service = self._apply_service(accessory)
            ip = service.spec.clusterIP if service is not None and service.spec else None
            if creds is not None and ip:
                out[name] = Secret(creds.link(accessory.kind, str(ip)))
                out[link_name(name)] = Secret(creds.password)
                self._secrets[link_name(name)] = Secret(creds.password)
        return out

    # -- mutations ---------------------------------------------------------------------

    def _namespace_made(self) -> None:
        """The slot's namespace, made as a deploy's plan makes it when it is missing: an
        accessory's Secret and Service are made before the app's first objects."""
        try:
            self.client.get(Namespace, self.namespace)
        except ApiError as exc:
            if exc.status.code == 403:
                return  # a namespace-scoped identity: the namespace is there
            if exc.status.code != 404:
                raise
            body = render.with_digest(render.namespace_unit(self.namespace))
            self.client.apply(from_dict(body), force=True)

    def _credentials(self, accessory: Accessory, make: bool) -> Credentials | None:
        """Its Secret's credentials; with ``make``, the Secret is created when missing
        (create, never apply: of two creators the second gets 409 and reads the first's)."""
        name = object_name(self.app.name, accessory.name)
        port = SERVER_PORTS[accessory.kind]
        try:
            found = self.client.get(SecretObject, name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404 or not make:
                if exc.status.code == 404:
                    return None
                raise
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "labels": self._accessory_labels(accessory.name)},
                "type": "Opaque",
                "stringData": {
                    "password": _random.token_urlsafe(24),
                    "database": self.app.name,
                },
            }
            try:
                self.client.create(from_dict(body), namespace=self.namespace)
            except ApiError as made:
                if made.status.code != 409:
                    raise
            found = self.client.get(SecretObject, name, namespace=self.namespace)
        data = found.data or {}
        return Credentials(
            base64.b64decode(data["password"]).decode(),
            port,
            base64.b64decode(data["database"]).decode(),
        )

    def _apply_service(self, accessory: Accessory) -> Any:
        name = object_name(self.app.name, accessory.name)
        port = SERVER_PORTS[accessory.kind]
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": self._accessory_labels(accessory.name),
            },
            "spec": {
                "type": "ClusterIP",
                "selector": self._accessory_labels(accessory.name),
                "ports": [{"name": accessory.kind, "port": port, "targetPort": port}],
            },
        }
        return self.client.apply(from_dict(body), force=True)

    def start_accessory(
        self,
        clearance: Clearance,
        target: Target,
        step: StartAccessory,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        self._guard(clearance, target)
        accessory = from_json(step.accessory, json.loads(step.declaration))
        with self._edge(f"starting accessory {accessory.name} in {target}"):
            creds = self._credentials(accessory, True)
            assert creds is not None
            self._secrets[link_name(accessory.name)] = Secret(creds.password)
            self._apply_service(accessory)
            live = self._accessory_object(StatefulSet, accessory.name)
        if step.action == "upgrade" and live is not None:
            # it builds on backups, which build on this module
            from shipway.backends.kubernetes.backups import KubernetesBackups
            from shipway.backends.kubernetes.upgrades import upgrade

            assert isinstance(self, KubernetesBackups)
            return upgrade(self, live, accessory, creds, deadline, reporter)
        with self._edge(f"starting accessory {accessory.name} in {target}"):
            body = self._statefulset(accessory, data_dir(live) or self._kept_pgdata(accessory))
            sts = self.client.apply(from_dict(body), force=True)
        return self._accessory_gate(accessory, sts.metadata.generation, deadline, reporter)

    def _kept_pgdata(self, accessory: Accessory) -> str | None:
        """The directory of the claim an upgrade left the data in, kept on the accessory's
        Secret (which lives as long as its claim: a StatefulSet ``destroy`` deleted is made
        anew on it)."""
        found = self._accessory_object(SecretObject, accessory.name)
        notes = (found.metadata.annotations or {}) if found is not None else {}
        return notes.get(PGDATA_NOTE)

    def _statefulset(self, accessory: Accessory, pgdata: str | None = None) -> dict[str, Any]:
        """Its StatefulSet, as the official image of its kind takes it: Postgres from the
        environment its entrypoint reads (the password from the Secret; PGDATA ``pgdata``,
        a directory of the claim: ``pgdata``, or ``pgN`` after an upgrade to major N), Redis
        from its command line (the password from the Secret, expanded by the kubelet; after
        an upgrade to major N, ``--dir`` ``pgdata`` = ``/data/redisN``, which a first
        container of the same image makes ready: :data:`REDIS_LOAD`)."""
        name = object_name(self.app.name, accessory.name)
        kind, port = accessory.kind, SERVER_PORTS[accessory.kind]
        labels = self._accessory_labels(accessory.name)
        password = {"secretKeyRef": {"name": name, "key": "password"}}
        container: dict[str, Any] = {
            "name": kind,
            "image": server_image(accessory, os.environ),
            "ports": [{"name": kind, "containerPort": port}],
            "volumeMounts": [{"name": "data", "mountPath": DATA_DIRS[kind]}],
            "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
        }
        init: list[dict[str, Any]] = []
        if kind == "postgres":
            container["env"] = [
                {"name": "POSTGRES_USER", "value": PG_USER},
                {"name": "POSTGRES_PASSWORD", "valueFrom": password},
                {"name": "POSTGRES_DB", "value": self.app.name},
                {"name": "PGDATA", "value": pgdata or f"{DATA_DIRS[kind]}/pgdata"},
            ]
        else:
            container["env"] = [{"name": "REDIS_PASSWORD", "valueFrom": password}]
            container["args"] = [
                "redis-server", "--requirepass", "$(REDIS_PASSWORD)", "--appendonly", "yes",
            ]  # fmt: skip
            if pgdata is not None and pgdata != DATA_DIRS[kind]:
                container["args"] += ["--dir", pgdata]
                load = {k: container[k] for k in ("image", "volumeMounts")}
                init = [{"name": "load", **load, "command": ["sh", "-c", REDIS_LOAD, pgdata]}]
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": labels,
                "annotations": {
                    render.DIGEST: accessory.digest(),
                    DECLARED: json.dumps(accessory.to_json(), sort_keys=True),
                },
            },
            "spec": {
                "serviceName": name,
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        **({"initContainers": init} if init else {}),
                        "containers": [container],
                        "terminationGracePeriodSeconds": 30,
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data", "labels": labels},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": accessory.size or DEFAULT_SIZE}},
                        },
                    }
                ],
            },
        }

    def _accessory_gate(
        self,
        accessory: Accessory,
        generation: int | None,
        deadline: float,
        reporter: Reporter,
        first_exit_fails: bool = False,
    ) -> Failure | None:
        """Until its pod of the applied revision is ready (its port accepts connections),
        or time is up: then what its pod says. ``first_exit_fails``: a container of that
        pod that exits with an error once has failed (a new major's, in an upgrade), with
        the end of its log."""
        name = object_name(self.app.name, accessory.name)
        until = min(deadline, time.monotonic() + START_LIMIT)
        while True:
            with self._edge(f"waiting on accessory {accessory.name}"):
                sts = self.client.get(StatefulSet, name, namespace=self.namespace)
                exited = self._exited(name, sts) if first_exit_fails else None
            if exited is not None:
                return Failure(
                    reason=Reason.STEP_FAILED,
                    message=f"accessory {accessory.describe()} did not start ({exited[0]})",
                    details=tuple([*self._pod_story(name), *exited[1]]),
                )
            status = sts.status
            done = (
                status is not None
                and (status.observedGeneration or 0) >= (generation or 0)
                and (status.readyReplicas or 0) >= 1
                and status.currentRevision == status.updateRevision
            )
            if done:
                reporter.line(f"  accessory {accessory.describe()} is ready ({name})")
                return None
            if time.monotonic() > until:
                return Failure(
                    reason=Reason.STEP_FAILED,
                    message=f"accessory {accessory.describe()} was not ready in time",
                    details=tuple(self._pod_story(name)),
                )
            time.sleep(LOOK)

    def _exited(self, name: str, sts: Any) -> tuple[str, list[str]] | None:
        """(which container of the StatefulSet's pod of its new revision exited with an
        error, the end of its log), or None."""
        try:
            pod = self.client.get(Pod, f"{name}-0", namespace=self.namespace)
        except ApiError:
            return None
        revision = (pod.metadata.labels or {}).get("controller-revision-hash")
        if pod.status is None or revision != (sts.status.updateRevision if sts.status else None):
            return None
        statuses = [
            *(pod.status.initContainerStatuses or []),
            *(pod.status.containerStatuses or []),
        ]
        for cs in statuses:
            ended = [st.terminated for st in (cs.state, cs.lastState) if st and st.terminated]
            code = next((t.exitCode for t in ended if t.exitCode), 0)
            if code:
                try:
                    said = list(self.client.log(
                        f"{name}-0", namespace=self.namespace, container=cs.name, tail_lines=6,
                    ))  # fmt: skip
                except ApiError as exc:
                    said = [f"(its log: {exc.status.message})"]
                tail = [f"  {cs.name}: {line.rstrip()}" for line in said]
                return f"{cs.name} exited {code}", [self._redact(line) for line in tail]
        return None

    def _pod_story(self, name: str) -> list[str]:
        """What its pod's status says (phase, conditions, container states)."""
        try:
            pod = self.client.get(Pod, f"{name}-0", namespace=self.namespace)
        except ApiError as exc:
            return [f"pod {name}-0: {exc.status.message}"]
        status = pod.status
        if status is None:
            return [f"pod {name}-0: no status"]
        out = [f"pod {name}-0: {status.phase}"]
        for c in status.conditions or []:
            if c.status != "True":
                out.append(f"  {c.type}: {c.reason or ''} {c.message or ''}".rstrip())
        for cs in status.containerStatuses or []:
            waiting = cs.state.waiting if cs.state else None
            if waiting is not None:
                out.append(f"  {cs.name}: {waiting.reason} {waiting.message or ''}".rstrip())
        return [self._redact(line) for line in out]

    # -- destroy -----------------------------------------------------------------------

    def _accessory_objects(self) -> list[tuple[str, type[Any], str]]:
        """(kind, resource, name) of the slot's accessories' objects, claims last."""
        out = []
        for kind, res in (
            ("StatefulSet", StatefulSet),
            ("Service", Service),
            ("Secret", SecretObject),
            ("PersistentVolumeClaim", PersistentVolumeClaim),
        ):
            out += [(kind, res, str(obj.metadata.name)) for obj in self._listed(res)]
        return out

    def _accessory_leftovers(self) -> list[Leftover]:
        return [
            Leftover(f"accessory {kind}", f"{name} (namespace {self.namespace})", data)
            for kind, _, name in self._accessory_objects()
            for data in [kind in ("PersistentVolumeClaim", "Secret")]
        ]

    def _destroy_accessories(self, volumes: bool, reporter: Reporter) -> None:
        """Its StatefulSet and Service go; its claim and Secret (the data and the password
        it was made with) only with ``volumes``."""
        for kind, res, name in self._accessory_objects():
            if kind in ("PersistentVolumeClaim", "Secret") and not volumes:
                continue
            try:
                self.client.delete(
                    res, name, namespace=self.namespace, cascade=CascadeType.BACKGROUND
                )
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
            reporter.line(f"  deleted accessory {kind} {name}")
