"""PURE: an app in a slot + a release → the Kubernetes objects that run it, as units.

No I/O, no clock, no randomness: the same inputs always give the same bytes, so golden
files can hold the expected output and a targeted restart can keep every other unit
byte-identical.

Objects (all in the slot's namespace, all labelled for ``observe`` and pruning):

* ``Namespace``                       phase 0
* ``Secret <app>-env``                phase 0: env and secrets, consumed with ``envFrom``
* ``ConfigMap <app>-files``           phase 0: plain config files (if any)
* ``Secret <app>-files-secret``       phase 0: config files that hold secrets (if any)
* ``Deployment <app>-<process>``      phase 1: waits, switches
* ``Service <app>-<process>``         phase 1: switches (processes with a port)
* ``Ingress <app>-<host>``            phase 2: switches (one per route)
* ``PersistentVolumeClaim <app>-<volume>`` phase 0: the slot's, in every generation (see
  :mod:`.volumes`: ReadWriteOnce claims, Recreate and pod affinity)

A release of a blue-green slot is a *generation* (``release.generation``): a complete copy
of these objects beside the others in the same namespace, each named with the generation
(``<app>-<process>-<generation>``, ``<app>-env-<generation>`` …) and labelled
``shipway.io/generation``, selectors included, so generations never share a pod. Its
Deployments carry no ``spec.replicas``: the count is the scale subresource's
(``Scale`` steps), so no later apply in that generation can revert a scale. It has no
Ingress: one Ingress per host belongs to the slot and is pointed at a generation's Service
(:func:`host_ingress`), so a switch is one write to one object.

Secret values never appear here: secret env vars and secret-bearing files hold the
``${secrets.NAME}`` placeholder; the backend substitutes values at the moment it applies.
The unit digest is added as the ``shipway.io/digest`` annotation at apply time (it is the
digest of this body, so it cannot be inside it).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from shipway.backends.expand import expand_words
from shipway.backends.imagemeta import start_command
from shipway.backends.kubernetes import volumes
from shipway.backends.kubernetes.names import dns_name
from shipway.release.artifact import PREREQUISITE, ROUTING, WORKLOAD, Artifact, Unit
from shipway.release.model import Release
from shipway.spec.model import App, ConfigFile, Healthcheck, Process, Route, Slot
from shipway.spec.secrets import placeholder

NAME = "app.kubernetes.io/name"
INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "shipway"

DIGEST = "shipway.io/digest"
DEPLOYMENT_ID = "shipway.io/deployment-id"
CONFIG_HASH = "shipway.io/config-hash"
TEMPLATE = "shipway.io/template"
GENERATION = "shipway.io/generation"  # on every object of a generation (and its pods)
ROUTES_TO = "shipway.io/routes-to"  # on a host's Ingress: the generation it routes to
REPLICAS = "shipway.io/replicas"  # on a generation's Deployment: the declared count

FILES_VOLUME = "shipway-files"
DEFAULT_WORKING_DIR = "/"

#: How long a pod behind a Service keeps serving once it is marked for deletion, before its
#: process gets SIGTERM (a preStop sleep): the endpoints controller, every node's kube-proxy
#: and an ingress controller take that long to stop sending it new connections. Without it
#: a stopping pod closes its port while traffic still reaches it (docs/kubernetes.md).
DRAIN_SECONDS = 5
#: What the process itself is given after SIGTERM: Kubernetes' default grace period.
STOP_SECONDS = 30
#: A process with a port and no healthcheck is ready once its port accepts connections,
#: probed as an HTTP check's defaults are (every second, 30 attempts).
PORT_CHECK = Healthcheck(path=None)

PHASES = {
    "Namespace": PREREQUISITE,
    "PersistentVolumeClaim": PREREQUISITE,
    "Secret": PREREQUISITE,
    "ConfigMap": PREREQUISITE,
    "Deployment": WORKLOAD,
    "Service": WORKLOAD,
    "Ingress": ROUTING,
}
API_VERSIONS = {
    "Namespace": "v1",
    "PersistentVolumeClaim": "v1",
    "Secret": "v1",
    "ConfigMap": "v1",
    "Deployment": "apps/v1",
    "Service": "v1",
    "Ingress": "networking.k8s.io/v1",
}


def instance_of(app: str, slot: str) -> str:
    return f"{app}-{slot}"


def selector_labels(app: str, slot: str) -> dict[str, str]:
    """What every object of this app in this slot carries; ``observe`` lists by it."""
    return {NAME: app, INSTANCE: instance_of(app, slot), MANAGED_BY: MANAGER}


def generation_labels(app: str, slot: str, generation: str | None) -> dict[str, str]:
    """The app's labels, plus the generation's name for the objects of a generation."""
    labels = selector_labels(app, slot)
    if generation:
        labels[GENERATION] = generation
    return labels


def unit_key(kind: str, name: str) -> str:
    return f"{kind}/{name}"


def split_key(key: str) -> tuple[str, str]:
    kind, _, name = key.partition("/")
    return kind, name


def _of(generation: str | None) -> tuple[str, ...]:
    return (generation,) if generation else ()


def env_secret_name(app: str, generation: str | None = None) -> str:
    return dns_name(app, "env", *_of(generation), limit=253)


def files_configmap_name(app: str, generation: str | None = None) -> str:
    return dns_name(app, "files", *_of(generation), limit=253)


def files_secret_name(app: str, generation: str | None = None) -> str:
    return dns_name(app, "files-secret", *_of(generation), limit=253)


def workload_name(app: str, process: str, generation: str | None = None) -> str:
    """Deployment and Service of a process (of a generation): a DNS label (Services need
    one), shortened with a hash suffix when too long."""
    return dns_name(app, process, *_of(generation))


def ingress_name(app: str, host: str) -> str:
    return dns_name(app, host.replace("*", "wildcard"), limit=253)


def file_key(path: str) -> str:
    """A ConfigMap/Secret key for a relative path (keys allow only ``[-._a-zA-Z0-9]``)."""
    return re.sub(r"[^-._a-zA-Z0-9]", "_", path)


def template_digest(template: Mapping[str, Any]) -> str:
    raw = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:20]


# -- units --------------------------------------------------------------------------


def _unit(body: dict[str, Any], process: str | None = None, generation: str | None = None) -> Unit:
    kind = body["kind"]
    return Unit(
        key=unit_key(kind, body["metadata"]["name"]),
        kind=kind,
        body=body,
        phase=PHASES[kind],
        process=process,
        generation=generation,
        waits=kind == "Deployment",
        switches=PHASES[kind] > PREREQUISITE,
    )


def _meta(name: str, namespace: str | None, labels: Mapping[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    return meta


def namespace_body(namespace: str) -> dict[str, Any]:
    """The same for every app sharing a namespace: app labels would flap between them."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "labels": {MANAGED_BY: MANAGER}},
    }


def namespace_unit(namespace: str) -> Unit:
    return _unit(namespace_body(namespace))


def with_digest(unit: Unit) -> dict[str, Any]:
    """The body as it is applied: a copy carrying the unit's digest as an annotation, which
    ``observe`` reads back to tell whether what runs is what a plan wants."""
    body = copy.deepcopy(dict(unit.body))
    meta = body.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), DIGEST: unit.digest}
    return body


def render(app: App, slot: Slot, release: Release) -> Artifact:
    """The units of ``release`` of ``app`` (already seen through ``app.in_slot``) in ``slot``."""
    namespace = slot.namespace or instance_of(app.name, slot.name)
    gen = release.generation
    labels = generation_labels(app.name, slot.name, gen)
    # The Namespace belongs to no generation (the lock creates it when it is missing): a
    # generation's artifact holds only what is its own, so what a restart or repair of
    # that generation compares and prunes is that generation alone.
    units = [] if gen else [namespace_unit(namespace)]
    slot_labels = selector_labels(app.name, slot.name)  # a claim is no generation's
    for _, volume in sorted(app.volumes.items()):
        units.append(_unit(volumes.claim_body(app.name, namespace, slot_labels, volume)))
    units.append(_unit(_env_secret(app, namespace, labels, release), None, gen))
    plain = [f for f in app.files if not f.secret_bearing]
    secret = [f for f in app.files if f.secret_bearing]
    if plain:
        body = _files_object("ConfigMap", app, namespace, labels, plain, release)
        units.append(_unit(body, None, gen))
    if secret:
        body = _files_object("Secret", app, namespace, labels, secret, release)
        units.append(_unit(body, None, gen))
    for name, process in app.processes.items():
        body = _deployment(app, namespace, labels, process, release, drain_seconds(slot))
        units.append(_unit(body, name, gen))
        ports = _service_ports(process, app.routes)
        if ports:
            units.append(_unit(_service(app, namespace, labels, process, ports, gen), name, gen))
    for route in () if gen else app.routes:  # a generation's hosts move by PointHost
        units.append(_unit(_ingress(app, namespace, labels, route), route.process))
    return Artifact(tuple(units))


def object_names(app: App) -> dict[tuple[str, str], str]:
    """PURE: (kind, name) of each object a rolling release of ``app`` (seen in its slot)
    is given, and what in the spec it comes from. Names join the app's name with a
    process's or a host's (``shop`` + ``web-api`` and ``shop-web`` + ``api`` both give
    ``shop-web-api``), so two apps sharing a namespace can be given one name: observe
    refuses that before anything is written."""
    names = {("Secret", env_secret_name(app.name)): "its environment Secret"}
    if any(not f.secret_bearing for f in app.files):
        names[("ConfigMap", files_configmap_name(app.name))] = "its config files"
    if any(f.secret_bearing for f in app.files):
        names[("Secret", files_secret_name(app.name))] = "its secret-bearing config files"
    for name, process in app.processes.items():
        names[("Deployment", workload_name(app.name, name))] = f"its process {name!r}"
        if _service_ports(process, app.routes):
            names[("Service", workload_name(app.name, name))] = f"its process {name!r}"
    for route in app.routes:
        names[("Ingress", ingress_name(app.name, route.host))] = f"its route for {route.host}"
    for volume in app.volumes:
        names[("PersistentVolumeClaim", volumes.claim_name(app.name, volume))] = (
            f"its volume {volume!r}"
        )
    return names


def _env_secret(
    app: App, namespace: str, labels: Mapping[str, str], release: Release
) -> dict[str, Any]:
    data = dict(sorted(app.env.items()))
    data.update({name: placeholder(name) for name in sorted(app.secrets)})
    meta = _meta(env_secret_name(app.name, release.generation), namespace, labels)
    # The config hash changes with any secret's value, so this body (and its digest)
    # changes too, and the Secret is re-applied when only a value changed.
    meta["annotations"] = {CONFIG_HASH: release.config_hash}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "stringData": data,
    }


def _files_object(
    kind: str,
    app: App,
    namespace: str,
    labels: Mapping[str, str],
    files: list[ConfigFile],
    release: Release,
) -> dict[str, Any]:
    gen = release.generation
    name = (
        files_configmap_name(app.name, gen)
        if kind == "ConfigMap"
        else files_secret_name(app.name, gen)
    )
    meta = _meta(name, namespace, labels)
    body: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": meta}
    data = {file_key(f.path): f.content for f in sorted(files, key=lambda f: f.path)}
    if kind == "Secret":
        meta["annotations"] = {CONFIG_HASH: release.config_hash}
        body["type"] = "Opaque"
        body["stringData"] = data
    else:
        body["data"] = data
    return body


def _files_volume(
    app: App, generation: str | None
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """One projected volume holding every config file, and one subPath mount per file
    (mounting the volume over the working dir would hide the image's own files)."""
    if not app.files:
        return None, []
    sources: list[dict[str, Any]] = []
    for kind, name, bearing in (
        ("configMap", files_configmap_name(app.name, generation), False),
        ("secret", files_secret_name(app.name, generation), True),
    ):
        chosen = sorted((f for f in app.files if f.secret_bearing == bearing), key=lambda f: f.path)
        if chosen:
            items = [{"key": file_key(f.path), "path": f.path} for f in chosen]
            sources.append({kind: {"name": name, "items": items}})
    volume = {"name": FILES_VOLUME, "projected": {"sources": sources}}
    return volume, [
        {"name": FILES_VOLUME, "mountPath": f.path, "subPath": f.path, "readOnly": True}
        for f in sorted(app.files, key=lambda f: f.path)
    ]


def _container(
    app: App, process: Process, release: Release, mounts: list[dict[str, Any]], drain: int
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": process.name, "image": image_of(release)}
    container.update(_start(release, process.name, expanded(app, process)))
    env = env_secret_name(app.name, release.generation)
    container["envFrom"] = [{"secretRef": {"name": env}}]
    if process.port is not None:
        container["ports"] = [{"name": "http", "containerPort": process.port, "protocol": "TCP"}]
    probe = _readiness_probe(process.healthcheck, process.port, app.probe_host(process.name))
    if probe is not None:
        container["readinessProbe"] = probe
    if drain:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": drain}}}
    resources = _resources(process)
    if resources:
        container["resources"] = resources
    base = (release.image_meta.working_dir if release.image_meta else None) or "/"
    if mounts:
        container["volumeMounts"] = [
            {**m, "mountPath": base.rstrip("/") + "/" + m["mountPath"]} for m in mounts
        ]
    _, data, _, _ = volumes.pod_parts(app, process.name, {}, base)
    if data:
        container["volumeMounts"] = [*container.get("volumeMounts", []), *data]
    return container


def expanded(app: App, process: Process) -> tuple[str, ...] | None:
    """The process's declared command with ``$PORT`` and ``${NAME}`` expanded as on every
    backend (:mod:`shipway.backends.expand`): from its env and port, secrets kept."""
    if not process.command:
        return process.command
    env = dict(app.env)
    if process.port is not None:
        env["PORT"] = str(process.port)
    return expand_words(process.command, env, keep=app.secrets)


def _start(release: Release, process: str, command: Sequence[str] | None) -> dict[str, Any]:
    """``command`` (entrypoint) and ``args`` by image type: herokuish ``/start <process>``,
    pack through the CNB launcher, dockerfile the declared command else the image's CMD."""
    start = start_command(release.image_meta, process, command)
    out: dict[str, Any] = {}
    if start.entrypoint is not None:
        out["command"] = list(start.entrypoint)
    if start.args:  # with a command set, no args means none: the image's CMD is not used
        out["args"] = list(start.args)
    return out


def image_of(release: Release) -> str:
    """The image reference, pinned to the digest when one is known (``repo:tag@sha256:…``:
    the tag stays readable, the digest decides what runs)."""
    image = release.image or ""
    if release.digest and release.digest.startswith("sha256:") and "@" not in image:
        return f"{image}@{release.digest}"
    return image


def _seconds(value: float, minimum: int = 1) -> int:
    return max(minimum, math.ceil(value))


def _readiness_probe(
    health: Healthcheck | None, port: int | None, host: str | None
) -> dict[str, Any] | None:
    """The kubelet's probe; it sends the process's route host name as ``Host`` (the pod's
    address where no route names the process), as the Docker and local checks do. A port
    and no healthcheck: the port must accept connections (as on Docker and local), so no
    pod gets traffic before it listens."""
    if port is None or (health is not None and health.path is None):
        return None
    check: dict[str, Any]
    if health is None:
        health, check = PORT_CHECK, {"tcpSocket": {"port": port}}
    else:
        get: dict[str, Any] = {"path": health.path, "port": port}
        if host is not None:
            get["httpHeaders"] = [{"name": "Host", "value": host}]
        check = {"httpGet": get}
    return {
        **check,
        "initialDelaySeconds": _seconds(health.initial_delay, 0),
        "periodSeconds": _seconds(health.interval),
        "timeoutSeconds": _seconds(health.timeout),
        "failureThreshold": health.attempts,
        "successThreshold": 1,
    }


def _resources(process: Process) -> dict[str, Any]:
    r = process.resources
    requests = {k: v for k, v in (("cpu", r.cpu_request), ("memory", r.memory_request)) if v}
    limits = {k: v for k, v in (("cpu", r.cpu_limit), ("memory", r.memory_limit)) if v}
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def drain_seconds(slot: Slot) -> int:
    """The preStop sleep of a slot's pods that serve traffic (0: none)."""
    return DRAIN_SECONDS if slot.drain_timeout is None else math.ceil(slot.drain_timeout)


def _deployment(
    app: App,
    namespace: str,
    labels: Mapping[str, str],
    process: Process,
    release: Release,
    drain: int,
) -> dict[str, Any]:
    gen = release.generation
    name = workload_name(app.name, process.name, gen)
    own = {**labels, COMPONENT: process.name}
    selector = {k: v for k, v in own.items() if k != MANAGED_BY}
    volume, mounts = _files_volume(app, gen)
    serves = bool(_service_ports(process, app.routes))
    drain = drain if serves else 0
    pod_spec: dict[str, Any] = {
        "containers": [_container(app, process, release, mounts, drain)],
        "enableServiceLinks": False,
    }
    if drain:  # the sleep counts in the grace period: the process keeps its own 30 s
        pod_spec["terminationGracePeriodSeconds"] = drain + STOP_SECONDS
    instance = {INSTANCE: labels[INSTANCE]}
    claims, _, marks, affinity = volumes.pod_parts(app, process.name, instance, None)
    if volume is not None or claims:
        pod_spec["volumes"] = ([volume] if volume is not None else []) + claims
    if affinity is not None:
        pod_spec["affinity"] = affinity
    template: dict[str, Any] = {
        "metadata": {
            "labels": {**own, **marks},
            "annotations": {
                DEPLOYMENT_ID: release.deployment_ids.get(process.name, ""),
                CONFIG_HASH: release.config_hash,
            },
        },
        "spec": pod_spec,
    }
    # Pods of the ReplicaSet this template makes carry this annotation: the rollout wait
    # tells the new pods from the old ones by it, without watching ReplicaSets.
    template["metadata"]["annotations"][TEMPLATE] = template_digest(template)
    spec: dict[str, Any] = {
        "replicas": process.replicas,
        "selector": {"matchLabels": selector},
        "template": template,
    }
    if marks and not gen:  # a ReadWriteOnce claim: the old pods let go of it first
        spec["strategy"] = {"type": "Recreate"}
    elif serves:  # no old pod stops before a new one is ready: never less capacity
        spec["strategy"] = {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
        }
    meta = _meta(name, namespace, own)
    if gen:
        # The count of a generation is set by Scale steps through the scale subresource:
        # a field this apply does not hold is one no later apply can revert.
        del spec["replicas"]
        meta["annotations"] = {REPLICAS: str(process.replicas)}
    health = process.healthcheck
    if health is not None and health.path is None and health.initial_delay:
        # No HTTP check: a pod proves itself by staying up for initial_delay.
        spec["minReadySeconds"] = _seconds(health.initial_delay)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": spec,
    }


def declared_replicas(body: Mapping[str, Any]) -> int:
    """The replicas a Deployment body asks for: its own field, else (a generation's) the
    declared count it carries as an annotation."""
    spec = body.get("spec", {})
    if "replicas" in spec:
        return int(spec["replicas"])
    annotations = body.get("metadata", {}).get("annotations") or {}
    return int(annotations.get(REPLICAS, 1))


def _service_ports(process: Process, routes: tuple[Route, ...]) -> list[int]:
    ports = {process.port} if process.port is not None else set()
    ports |= {r.port for r in routes if r.process == process.name and r.port is not None}
    return sorted(ports)


def _service(
    app: App,
    namespace: str,
    labels: Mapping[str, str],
    process: Process,
    ports: list[int],
    generation: str | None = None,
) -> dict[str, Any]:
    own = {**labels, COMPONENT: process.name}
    selector = {k: v for k, v in own.items() if k != MANAGED_BY}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(workload_name(app.name, process.name, generation), namespace, own),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": f"port-{p}", "port": p, "targetPort": p, "protocol": "TCP"} for p in ports
            ],
        },
    }


def _ingress(app: App, namespace: str, labels: Mapping[str, str], route: Route) -> dict[str, Any]:
    process = app.processes[route.process]
    port = route.port or process.port
    own = {**labels, COMPONENT: route.process}
    service = workload_name(app.name, route.process)
    return _ingress_body(ingress_name(app.name, route.host), namespace, own, route, service, port)


def host_ingress(
    app: App, slot: str, namespace: str, route: Route, generation: str
) -> dict[str, Any]:
    """The slot's Ingress for one host, pointed at a generation's Service. Same name as a
    rolling slot's (switching a slot's strategy keeps the object, and its address on
    controllers that give each Ingress its own load balancer); labelled with the generation
    it routes to, but not as part of it (``shipway.io/routes-to``, not
    ``shipway.io/generation``): it belongs to the slot, never to a generation."""
    process = app.processes[route.process]
    port = route.port or process.port
    own = {**selector_labels(app.name, slot), COMPONENT: route.process, ROUTES_TO: generation}
    service = workload_name(app.name, route.process, generation)
    return _ingress_body(ingress_name(app.name, route.host), namespace, own, route, service, port)


def _ingress_body(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    route: Route,
    service: str,
    port: int | None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "rules": [
            {
                "host": route.host,
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {
                                "service": {
                                    "name": service,
                                    "port": {"number": port},
                                }
                            },
                        }
                    ]
                },
            }
        ]
    }
    if route.tls_secret:
        spec["tls"] = [{"hosts": [route.host], "secretName": route.tls_secret}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": _meta(name, namespace, labels),
        "spec": spec,
    }


RELEASE_COMMAND = "shipway.io/release-command"
ONE_OFF = "shipway.io/run"  # on a one-off command's pod: the run's name


def one_off_template(
    release: Release,
    process: str | None,
    command: list[str],
    container_name: str,
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """A pod template for a command run once: the process's own pod (``process`` None: the
    first one's) — image, env, files — with ``command`` instead of its own, no probes or
    ports, never restarted. Its labels leave out the process's component, so no
    ReplicaSet adopts it and no Service sends it traffic."""
    deployments = [u for u in release.artifact if u.kind == "Deployment"]
    if not deployments:
        raise ValueError("the release has no Deployment to take the pod from")
    chosen = next((u for u in deployments if u.process == process), deployments[0])
    template: dict[str, Any] = json.loads(json.dumps(chosen.body["spec"]["template"]))
    container = template["spec"]["containers"][0]
    container["name"] = container_name
    container.pop("command", None)
    container.pop("args", None)
    container.update(_start(release, process or container_name, command))
    for key in ("readinessProbe", "livenessProbe", "startupProbe", "ports", "lifecycle"):
        container.pop(key, None)
    template["spec"]["containers"] = [container]
    template["spec"].pop("terminationGracePeriodSeconds", None)  # no traffic to drain
    template["spec"]["restartPolicy"] = "Never"
    own = {k: v for k, v in template["metadata"]["labels"].items() if k not in (COMPONENT,)}
    template["metadata"] = {"labels": {**own, **labels}}
    return template


def release_job(
    release: Release, namespace: str, command: list[str], deadline: int | None = None
) -> dict[str, Any]:
    """The Job that runs the release command (migrations) once, after the release's
    ConfigMaps and Secrets and before any Deployment is applied: the first process's pod
    (image, env, files) with the command instead of its own, never restarted. ``deadline``:
    seconds after which the cluster itself stops it (``activeDeadlineSeconds``), so it ends
    even when shipway was killed."""
    labels = {RELEASE_COMMAND: f"r{release.revision}"}
    template = one_off_template(release, None, command, "release", labels)
    labels = dict(template["metadata"]["labels"])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": dns_name(release.app, "release", f"r{release.revision}"),
            "namespace": namespace,
            "labels": labels,
        },
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 86400,
            **({"activeDeadlineSeconds": deadline} if deadline is not None else {}),
            "template": template,
        },
    }


def one_off_pod(
    release: Release, namespace: str, process: str, command: list[str], name: str
) -> dict[str, Any]:
    """The pod of a one-off command (``shipway run``): made from ``process``'s pod template
    in the deployed ``release``, named ``name``, labelled with it."""
    template = one_off_template(release, process, command, process, {ONE_OFF: name})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **template["metadata"]},
        "spec": template["spec"],
    }
