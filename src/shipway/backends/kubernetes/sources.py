"""A slot's objects from its source: the team's manifests (or a chart's rendered objects)
read, checked and turned into units in a safe order. Local files only: no cluster I/O.

Every object becomes one unit, keyed ``Kind/name`` (``Kind.group/name`` for kinds outside
Kubernetes' own API groups, so two groups' ``Certificate`` never collide), in this order:

  0. CustomResourceDefinitions and Namespaces         phase 0 (prerequisites)
  1. RBAC: ServiceAccounts, Roles, bindings            phase 0
  2. config: ConfigMaps, quotas, policies              phase 0
  3. Secrets                                           phase 0
  4. claims: PersistentVolumeClaims (and volumes)      phase 0
  5. anything else: custom resources                   phase 1 (after the CRDs are Established)
  6. workloads: Deployments, StatefulSets, DaemonSets, Jobs, CronJobs
  7. Services                                          phase 2
  8. routes: Ingresses, Gateway API routes

Each object is labelled ``shipway.io/app``, ``shipway.io/slot`` and
``app.kubernetes.io/managed-by: shipway`` (the labels ``observe`` lists by; the team's own
``app.kubernetes.io/name``/``instance`` are left as they are). A cluster-scoped object also
gets ``shipway.io/namespace`` when it is applied (the backend knows its scope): it belongs to
the slot of one namespace. Labels alone never make an object the slot's to prune or
rewrite: only one its records list as applied (invariant 14). A pod
template also gets ``shipway.io/pod-of`` (the one pod watch of an operation selects by it)
and ``shipway.io/template`` (a digest of the template: the pods of the revision shipway
applied are the pods that carry it). Nothing else of an object is changed, except, with
``--image``, the image of the containers the source's ``image_containers`` names.

What must never happen here:
  * a Secret's data in a unit — it would reach plans, diffs and records' plain parts. Each
    value becomes a ``${secrets.S_…}`` placeholder (named by a salted digest of where it
    is and what it is, so a changed value changes the unit) and the values travel apart;
  * an object silently moved to another namespace — a namespaced object naming another
    namespace is refused with its file;
  * an empty set pruning everything — an empty source is refused, naming its files.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.names import dns_name
from shipway.errors import InputError
from shipway.release.artifact import PREREQUISITE, ROUTING, WORKLOAD, Artifact, Unit
from shipway.spec.limits import Unreadable, read_regular_file
from shipway.spec.secrets import Secret, placeholder
from shipway.spec.source import ContainerRef

SOURCE_APP = "shipway.io/app"
SOURCE_SLOT = "shipway.io/slot"
#: on a source's cluster-scoped objects only, set when they are applied: app and slot name
#: alone are the same for two slots of one name in two namespaces (or clusters' namespaces)
SOURCE_NAMESPACE = "shipway.io/namespace"
POD_OF = "shipway.io/pod-of"  # on the pod templates of a source's workloads
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
#: the file names kustomize reads a directory's kustomization from
KUSTOMIZATIONS = frozenset({"kustomization.yaml", "kustomization.yml", "Kustomization"})
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_OBJECTS = 5000

#: The API groups of Kubernetes itself: their kinds are keyed ``Kind/name``.
BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "autoscaling",
        "policy",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "apiextensions.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "node.k8s.io",
        "admissionregistration.k8s.io",
        "certificates.k8s.io",
        "apiregistration.k8s.io",
        "flowcontrol.apiserver.k8s.io",
    }
)
RANKS: Mapping[str, int] = {
    "CustomResourceDefinition": 0,
    "Namespace": 0,
    "ServiceAccount": 1,
    "Role": 1,
    "ClusterRole": 1,
    "RoleBinding": 1,
    "ClusterRoleBinding": 1,
    "ConfigMap": 2,
    "LimitRange": 2,
    "ResourceQuota": 2,
    "PriorityClass": 2,
    "StorageClass": 2,
    "NetworkPolicy": 2,
    "PodDisruptionBudget": 2,
    "Secret": 3,
    "PersistentVolume": 4,
    "PersistentVolumeClaim": 4,
    "Deployment": 6,
    "StatefulSet": 6,
    "DaemonSet": 6,
    "ReplicaSet": 6,
    "Job": 6,
    "CronJob": 6,
    "Pod": 6,
    "HorizontalPodAutoscaler": 6,
    "Service": 7,
    "Ingress": 8,
    "IngressClass": 8,
    "Gateway": 8,
    "HTTPRoute": 8,
    "GRPCRoute": 8,
    "TLSRoute": 8,
    "TCPRoute": 8,
}
OTHER_RANK = 5
#: Kinds with no status to wait on: ready once applied, so no wait step at all.
NO_STATUS = frozenset(
    {
        "Namespace",
        "ServiceAccount",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
        "ConfigMap",
        "Secret",
        "LimitRange",
        "ResourceQuota",
        "PriorityClass",
        "StorageClass",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "PersistentVolume",
        "HorizontalPodAutoscaler",
        "Service",
        "Ingress",
        "IngressClass",
    }
)
#: Kinds whose objects hold a pod template, and where it is.
TEMPLATE_PATHS: Mapping[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
#: What ``stop`` scales to zero (and ``observe`` then calls stopped).
STOPPED_KINDS = frozenset({"Deployment", "StatefulSet"})
#: Never deleted because they left the set: deleting a CRD deletes every object of its
#: kind, a Namespace everything in it, a claim or a volume its data (invariant 11).
NEVER_PRUNED = frozenset(
    {"CustomResourceDefinition", "Namespace", "PersistentVolumeClaim", "PersistentVolume"}
)


@dataclass(frozen=True)
class SourceObject:
    """One object of a source, and where it came from (``k8s/app.yaml#2``)."""

    where: str
    body: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name", ""))


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def source_key(api_version: str, kind: str, name: str) -> str:
    """``Deployment/web``; ``Widget.example.com/w1`` for a kind of another API group."""
    group = group_of(api_version)
    qualified = kind if group in BUILTIN_GROUPS else f"{kind}.{group}"
    return render.unit_key(qualified, name)


def phase_of(kind: str) -> int:
    rank = RANKS.get(kind, OTHER_RANK)
    return PREREQUISITE if rank < OTHER_RANK else WORKLOAD if rank < 7 else ROUTING


def source_labels(app: str, slot: str) -> dict[str, str]:
    """What every object of a source carries; ``observe`` lists by these, pruning trusts
    them."""
    return {SOURCE_APP: app, SOURCE_SLOT: slot}


def pod_label_value(app: str, slot: str) -> str:
    return dns_name(app, slot)


def is_source_unit(unit: Unit) -> bool:
    labels = (unit.body.get("metadata") or {}).get("labels") or {}
    return SOURCE_SLOT in labels


# -- reading ------------------------------------------------------------------------------


def manifest_files(base_dir: Path, paths: Sequence[str]) -> list[tuple[str, Path]]:
    """The files a manifests source names, each as (its name as shown, its path): a file
    as given, a directory's ``.yaml``/``.yml``/``.json`` files below it in name order
    (hidden ones skipped). A kustomization among them is refused (:func:`_no_kustomize`)."""
    out: list[tuple[str, Path]] = []
    kustomizations: list[str] = []
    for given in paths:
        full = base_dir / given
        if full.is_dir():
            found = sorted(
                p
                for p in full.rglob("*")
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(full).parts)
            )
            kustomizations += [
                str(Path(given) / p.relative_to(full)) for p in found if p.name in KUSTOMIZATIONS
            ]
            out += [
                (str(Path(given) / p.relative_to(full)), p)
                for p in found
                if p.suffix in MANIFEST_SUFFIXES
            ]
        else:
            if full.name in KUSTOMIZATIONS:
                kustomizations.append(given)
            out.append((given, full))
    _no_kustomize(kustomizations)
    return out


def _no_kustomize(found: Sequence[str]) -> None:
    """Kustomize's input is not a set of objects: a kustomization.yaml is no object at all,
    and its resources are the bases before their patches, overlays and generators. Applied
    as they are, they would be the wrong objects. shipway does not build kustomizations (no
    well-kept Python library does; it would take kustomize's Go library or its binary), so
    the team renders them first and names the output."""
    if not found:
        return
    first = Path(min(found, key=lambda f: (len(Path(f).parts), f))).parent
    raise InputError(
        "the manifests hold a kustomization, which shipway does not build: "
        + ", ".join(found)
        + f"\n  hint: render it first, e.g. `kustomize build {first} > rendered.yaml` "
        "(or `kubectl kustomize`), and point `manifests` at the output"
    )


def read_manifests(base_dir: Path, paths: Sequence[str]) -> list[SourceObject]:
    """Every object of the files (multi-document YAML, ``kind: List`` expanded); every
    problem of every file in one InputError naming the file and the document."""
    problems: list[str] = []
    objects: list[SourceObject] = []
    for shown, path in manifest_files(base_dir, paths):
        try:
            text = read_regular_file(path, MAX_MANIFEST_BYTES).decode("utf-8")
        except (Unreadable, UnicodeDecodeError) as exc:
            problems.append(f"{shown}: {exc if isinstance(exc, Unreadable) else 'not UTF-8'}")
            continue
        objects += parse_documents(text, shown, problems)
    if problems:
        raise InputError("the manifests cannot be read:\n  " + "\n  ".join(problems))
    return objects


def parse_documents(text: str, shown: str, problems: list[str]) -> list[SourceObject]:
    """The objects of one YAML stream; what is wrong goes to ``problems``."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out: list[SourceObject] = []
    try:
        documents = list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problems.append(f"{shown}:{line} not valid YAML: {getattr(exc, 'problem', exc)}")
        return out
    for i, doc in enumerate(documents, start=1):
        where = f"{shown}#{i}"
        if doc is None:
            continue
        listed = isinstance(doc, dict) and doc.get("kind") == "List"
        items = (doc.get("items") or []) if listed else [doc]
        for j, item in enumerate(items):
            at = f"{where}.items[{j}]" if listed else where
            problem = _object_problem(item)
            if problem:
                problems.append(f"{at}: {problem}")
            else:
                out.append(SourceObject(at, item))
    return out


def _object_problem(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return "not a Kubernetes object (a mapping with apiVersion, kind, metadata.name)"
    for key in ("apiVersion", "kind"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            return f"no {key}"
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return (
            f"{obj['kind']}: no metadata.name (generateName is not supported: pruning needs names)"
        )
    return None


# -- units --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceUnits:
    """A source's units, and the values of its Secrets' data, by placeholder name."""

    artifact: Artifact
    values: Mapping[str, Secret]


def to_units(
    objects: Sequence[SourceObject],
    *,
    app: str,
    slot: str,
    namespace: str,
    described: str,
    salt: str,
    image: str | None = None,
    image_containers: Sequence[ContainerRef] = (),
) -> SourceUnits:
    """The units of a source's objects, in the safe order; InputError listing every problem
    (an empty set, the same object twice, another namespace, an image for no container).
    ``salt``: the slot's secret-mark salt, which keys the names of Secret values."""
    if not objects:
        raise InputError(
            f"the {described} holds no objects: refusing to apply an empty set, which would "
            "prune every object this slot runs (hint: check the paths, or remove the slot)"
        )
    if len(objects) > MAX_OBJECTS:
        raise InputError(f"the {described} holds {len(objects)} objects (at most {MAX_OBJECTS})")
    problems: list[str] = []
    seen: dict[str, str] = {}
    bodies: list[tuple[SourceObject, dict[str, Any]]] = []
    for obj in objects:
        key = source_key(str(obj.body["apiVersion"]), obj.kind, obj.name)
        if key in seen:
            problems.append(f"{obj.where}: {key} is also in {seen[key]}")
            continue
        seen[key] = obj.where
        body = copy.deepcopy(dict(obj.body))
        meta = body["metadata"]
        given = meta.pop("namespace", None)
        if given not in (None, namespace):
            problems.append(
                f"{obj.where}: {key} names namespace {given!r}, but slot {slot!r} applies to "
                f"{namespace!r} (hint: remove metadata.namespace, or use a slot for {given!r})"
            )
            continue
        bodies.append((obj, body))
    if image is not None:
        problems += _set_images(bodies, image, image_containers)
    if problems:
        raise InputError(f"the {described} cannot be applied:\n  " + "\n  ".join(problems))
    values: dict[str, Secret] = {}
    units = []
    for obj, body in sorted(bodies, key=lambda ob: RANKS.get(ob[0].kind, OTHER_RANK)):
        key = source_key(str(body["apiVersion"]), obj.kind, obj.name)
        _label(body, app, slot)
        if obj.kind == "Secret":
            values.update(_secret_placeholders(body, salt, key))
        units.append(
            Unit(
                key=key,
                kind=obj.kind,
                body=body,
                phase=phase_of(obj.kind),
                waits=obj.kind not in NO_STATUS,
                switches=phase_of(obj.kind) > PREREQUISITE,
            )
        )
    return SourceUnits(Artifact(tuple(units)), values)


def _label(body: dict[str, Any], app: str, slot: str) -> None:
    meta = body["metadata"]
    meta["labels"] = {
        **(meta.get("labels") or {}),
        **source_labels(app, slot),
        render.MANAGED_BY: render.MANAGER,
    }
    template = _template(body)
    if template is None:
        return
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), POD_OF: pod_label_value(app, slot)}
    notes = {k: v for k, v in (tmeta.get("annotations") or {}).items() if k != render.TEMPLATE}
    tmeta["annotations"] = notes
    tmeta["annotations"][render.TEMPLATE] = render.template_digest(template)


def _template(body: Mapping[str, Any]) -> dict[str, Any] | None:
    path = TEMPLATE_PATHS.get(str(body.get("kind")))
    node: Any = body
    for part in path or ():
        node = node.get(part) if isinstance(node, dict) else None
    return node if path and isinstance(node, dict) else None


def containers_of(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A workload's containers and init containers (the dicts themselves)."""
    template = _template(body)
    spec = (template or {}).get("spec") or {}
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def _set_images(
    bodies: Iterable[tuple[SourceObject, dict[str, Any]]],
    image: str,
    refs: Sequence[ContainerRef],
) -> list[str]:
    by_key = {render.unit_key(obj.kind, obj.name): body for obj, body in bodies}
    problems = []
    for ref in refs:
        body = by_key.get(ref.workload)
        if body is None:
            problems.append(
                f"image_containers names {ref.workload}, which the source does not hold"
            )
            continue
        containers = containers_of(body)
        chosen = [c for c in containers if ref.container in (None, c.get("name"))]
        if not chosen:
            names = ", ".join(str(c.get("name")) for c in containers) or "none"
            problems.append(f"{ref}: no such container (containers: {names})")
        for container in chosen:
            container["image"] = image
    return problems


def _secret_placeholders(body: dict[str, Any], salt: str, key: str) -> dict[str, Secret]:
    """A Secret's ``data`` and ``stringData`` as ``data`` placeholders; the values (base64,
    as ``data`` holds them) returned by placeholder name — HMAC-SHA256 of where the value
    is and what it is, under the slot's secret-mark salt, which only the records hold: a
    changed value changes the unit, and no output holds a hash a guessed value could be
    checked against. ``stringData`` becomes ``data``: fields applied as stringData could
    never be removed again by server-side apply."""
    data: dict[str, str] = {k: str(v) for k, v in (body.pop("data", None) or {}).items()}
    for k, v in (body.pop("stringData", None) or {}).items():
        data[k] = base64.b64encode(str(v).encode()).decode()
    values: dict[str, Secret] = {}
    out: dict[str, str] = {}
    for name, value in sorted(data.items()):
        where = f"shipway-source-secret\0{key}\0{name}\0{value}".encode()
        ref = "S_" + hmac.new(salt.encode(), where, hashlib.sha256).hexdigest()[:32]
        values[ref] = Secret(value)
        out[name] = placeholder(ref)
    if out:
        body["data"] = out
    return values


def decoded(values: Mapping[str, Secret]) -> dict[str, Secret]:
    """The plain text of base64 Secret values too (what a pod prints is the plain one), for
    masking; binary values have none."""
    out = {}
    for name, value in values.items():
        try:
            out[f"{name}.plain"] = Secret(base64.b64decode(value.reveal()).decode())
        except (ValueError, UnicodeDecodeError):
            continue
    return out
