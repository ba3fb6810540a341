"""``[slots.NAME.source]`` (and the app-level ``[source]`` default): where a Kubernetes
slot's objects come from when they are not shipway's own render of the spec.

```toml
[source]                                   # the default of every kubernetes slot
manifests = ["k8s/", "extra.yaml"]         # files and directories of multi-document YAML
image_containers = ["Deployment/web", "StatefulSet/db:postgres"]   # what --image sets
cluster_scoped = ["CustomResourceDefinition"]                      # or true: any kind
helm_records = "superseded"   # or "removed": a Helm release's records, after --take-over

[slots.prod.source]                        # a slot's own source replaces the default whole
chart = "deploy/chart"
release = "shop"                           # default: the app's name
values = ["deploy/values-prod.yaml"]
set = { "image.tag" = "v2", replicas = 3 }
```

Exactly one of ``manifests`` or ``chart``. Paths are relative to the spec's directory and
must exist when the spec is loaded (a recorded release's snapshot is not checked: it may be
read on a machine without the files, and a rollback never reads them). ``set`` keys are
Helm ``--set`` paths (``a.b.c``), applied over the values files in order.

What must never happen: a source that silently does nothing — every key that does not apply
is an error with its key path (a source on a docker or local slot, ``replicas`` or
``routes`` overrides on a source slot, a blue-green source slot).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shipway.spec.check import Checker, kind_of
from shipway.spec.locate import KeyPath

SOURCE_KEYS = (
    "manifests",
    "chart",
    "release",
    "values",
    "set",
    "image_containers",
    "cluster_scoped",
    "helm_records",
)
#: What ``--take-over`` does to the records of a Helm release whose objects it takes: marked
#: superseded (its last revision no longer lists them), or removed altogether.
HELM_RECORDS = ("superseded", "removed")
#: Helm's own rule for a release name (pkg/chartutil ValidateReleaseName): at most 53.
RELEASE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RELEASE_NAME_MAX = 53
#: ``KIND/NAME[:CONTAINER]``, as ``set-image`` and ``image_containers`` name a container.
WORKLOAD_REF = re.compile(
    r"^(?P<kind>[A-Za-z][A-Za-z0-9]*)/(?P<name>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)"
    r"(:(?P<container>[a-z0-9]([-a-z0-9]*[a-z0-9])?))?$"
)
SET_KEY = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
ANY_KIND = "*"


@dataclass(frozen=True)
class ContainerRef:
    """``KIND/NAME[:CONTAINER]``: a workload and one of its containers (None: the workload's
    only container, or with ``image_containers`` every container of it)."""

    kind: str
    name: str
    container: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}" + (f":{self.container}" if self.container else "")

    @property
    def workload(self) -> str:
        return f"{self.kind}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ContainerRef | None:
        found = WORKLOAD_REF.match(text)
        if found is None:
            return None
        return cls(found["kind"], found["name"], found["container"])


@dataclass(frozen=True)
class Source:
    """A slot's objects: the team's ``manifests``, or a Helm ``chart`` with its release
    name, values files and ``set`` values. Paths are as written, relative to the spec's
    directory."""

    manifests: tuple[str, ...] = ()
    chart: str | None = None
    release: str | None = None
    values: tuple[str, ...] = ()
    set: Mapping[str, Any] = field(default_factory=dict)
    image_containers: tuple[ContainerRef, ...] = ()
    #: kinds the slot may apply at cluster scope; ``("*",)``: any
    cluster_scoped: tuple[str, ...] = ()
    #: what a take-over does to a Helm release's records (one of HELM_RECORDS)
    helm_records: str = HELM_RECORDS[0]

    @property
    def kind(self) -> str:
        return "chart" if self.chart is not None else "manifests"

    def describe(self) -> str:
        if self.chart is not None:
            return f"chart {self.chart}"
        return "manifests " + ", ".join(self.manifests)

    def allows_cluster_scoped(self, kind: str) -> bool:
        return ANY_KIND in self.cluster_scoped or kind in self.cluster_scoped

    def release_name(self, app: str) -> str:
        return self.release or app

    def set_values(self) -> dict[str, Any]:
        """``set`` as nested values: ``{"image.tag": "v2"}`` → ``{"image": {"tag": "v2"}}``
        (a key whose value is a table merges into it, as Helm's ``--set`` does)."""
        out: dict[str, Any] = {}
        for key, value in self.set.items():
            merge_values(out, nest(key.split("."), copy.deepcopy(value)))
        return out

    def to_json(self) -> dict[str, Any]:
        """The section as the spec writes it (a release's snapshot holds it)."""
        out: dict[str, Any] = {}
        if self.chart is not None:
            out["chart"] = self.chart
            if self.release is not None:
                out["release"] = self.release
            if self.values:
                out["values"] = list(self.values)
            if self.set:
                out["set"] = copy.deepcopy(dict(self.set))
        else:
            out["manifests"] = list(self.manifests)
        if self.image_containers:
            out["image_containers"] = [str(c) for c in self.image_containers]
        if self.cluster_scoped:
            scoped = list(self.cluster_scoped)
            out["cluster_scoped"] = True if scoped == [ANY_KIND] else scoped
        if self.helm_records != HELM_RECORDS[0]:
            out["helm_records"] = self.helm_records
        return out


def nest(parts: list[str], value: Any) -> dict[str, Any]:
    """``["a", "b"], 1`` → ``{"a": {"b": 1}}``."""
    out: Any = value
    for part in reversed(parts):
        out = {part: out}
    result: dict[str, Any] = out
    return result


def merge_values(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of values files and ``--set``: tables merge key by key at any depth,
    anything else in ``over`` replaces what ``base`` had. ``base`` is changed in place."""
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge_values(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


# -- validation ---------------------------------------------------------------------------


def parse_source(
    c: Checker, raw: Any, path: KeyPath, base_dir: Path, *, check_files: bool = True
) -> Source | None:
    """A validated Source, or None with every problem recorded on ``c``."""
    s = c.table(raw, path, SOURCE_KEYS)
    if s is None:
        return None
    has = [k for k in ("manifests", "chart") if k in s]
    if len(has) != 1:
        c.error(
            path,
            "needs exactly one of manifests or chart"
            + (" (both are given)" if len(has) == 2 else ""),
            'e.g. manifests = ["k8s/"], or chart = "deploy/chart"',
        )
        return None
    chart_only = [k for k in ("release", "values", "set") if k in s]
    if "manifests" in s:
        for key in chart_only:
            c.error((*path, key), "applies to a chart source only", f"remove {key}")
    before = len(c.problems)
    manifests = (
        _paths(c, s["manifests"], (*path, "manifests"), base_dir, check_files, dirs=True)
        if "manifests" in s
        else ()
    )
    if "manifests" in s and not manifests and len(c.problems) == before:
        c.error((*path, "manifests"), "is empty", 'list files or directories, e.g. ["k8s/"]')
    chart = None
    if "chart" in s:
        chart = c.string(s["chart"], (*path, "chart"), hint='a chart directory, e.g. "chart/"')
        if chart is not None and check_files:
            _check_chart(c, base_dir, chart, (*path, "chart"))
    release = None
    if "release" in s:
        release = c.string(
            s["release"],
            (*path, "release"),
            pattern=RELEASE_NAME,
            what="release name",
            hint="lowercase letters, digits, '-' and '.', as Helm names releases",
        )
        if release is not None and len(release) > RELEASE_NAME_MAX:
            c.error((*path, "release"), f"is longer than {RELEASE_NAME_MAX} characters")
    values = (
        _paths(c, s["values"], (*path, "values"), base_dir, check_files, dirs=False)
        if "values" in s and chart is not None
        else ()
    )
    set_table = _set(c, s["set"], (*path, "set")) if "set" in s and chart is not None else {}
    containers = (
        _containers(c, s["image_containers"], (*path, "image_containers"))
        if "image_containers" in s
        else ()
    )
    scoped = (
        _cluster_scoped(c, s["cluster_scoped"], (*path, "cluster_scoped"))
        if "cluster_scoped" in s
        else ()
    )
    helm_records = HELM_RECORDS[0]
    if "helm_records" in s:
        given = c.string(s["helm_records"], (*path, "helm_records"))
        if given is not None and given not in HELM_RECORDS:
            c.error(
                (*path, "helm_records"),
                f"{given!r} is not one of {', '.join(HELM_RECORDS)}",
                '"superseded" (Helm keeps its history) or "removed"',
            )
        elif given is not None:
            helm_records = given
    if len(c.problems) > before:
        return None
    return Source(
        manifests=manifests,
        chart=chart,
        release=release,
        values=values,
        set=set_table,
        image_containers=containers,
        cluster_scoped=scoped,
        helm_records=helm_records,
    )


def _paths(
    c: Checker, raw: Any, path: KeyPath, base_dir: Path, check_files: bool, *, dirs: bool
) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        c.error(path, f"must be a list of paths, not {kind_of(raw)}")
        return ()
    out: list[str] = []
    for i, item in enumerate(raw):
        where = (*path, i)
        text = c.string(item, where, hint="a path relative to the spec's directory")
        if not text:
            if text == "":
                c.error(where, "is empty", "a path relative to the spec's directory")
            continue
        if check_files:
            full = base_dir / text
            if not full.exists():
                c.error(where, f"{text}: no such file or directory", "check the path")
                continue
            if full.is_dir() and not dirs:
                c.error(where, f"{text} is a directory", "name a YAML file")
                continue
        out.append(text)
    return tuple(out)


def _check_chart(c: Checker, base_dir: Path, given: str, path: KeyPath) -> None:
    chart = base_dir / given
    if chart.is_dir():
        if not (chart / "Chart.yaml").is_file():
            c.error(path, f"{given} holds no Chart.yaml", "name a chart directory")
    elif not chart.exists():
        c.error(path, f"{given}: no such chart directory", "check the path")
    else:
        c.error(path, f"{given} is not a directory", "name an unpacked chart directory")


def _set(c: Checker, raw: Any, path: KeyPath) -> dict[str, Any]:
    table = c.table(raw, path) or {}
    for key in table:
        if not SET_KEY.match(key):
            c.error(
                (*path, key),
                f"{key!r} is not a values path",
                'dotted names such as "image.tag"; for lists, use a values file',
            )
    return {k: v for k, v in table.items() if SET_KEY.match(k)}


def _containers(c: Checker, raw: Any, path: KeyPath) -> tuple[ContainerRef, ...]:
    if not isinstance(raw, list):
        c.error(path, f"must be a list, not {kind_of(raw)}", 'e.g. ["Deployment/web"]')
        return ()
    out = []
    for i, item in enumerate(raw):
        text = c.string(item, (*path, i))
        if text is None:
            continue
        ref = ContainerRef.parse(text)
        if ref is None:
            c.error(
                (*path, i),
                f"{text!r} is not KIND/NAME[:CONTAINER]",
                'e.g. "Deployment/web" or "StatefulSet/db:postgres"',
            )
            continue
        out.append(ref)
    return tuple(out)


def _cluster_scoped(c: Checker, raw: Any, path: KeyPath) -> tuple[str, ...]:
    if isinstance(raw, bool):
        return (ANY_KIND,) if raw else ()
    if not isinstance(raw, list) or not all(isinstance(k, str) and k for k in raw):
        c.error(
            path,
            f"must be true, false or a list of kinds, not {kind_of(raw)}",
            'e.g. ["CustomResourceDefinition", "ClusterRole"]',
        )
        return ()
    return tuple(raw)


def every_slot_has_source(top: Any) -> bool:
    """Whether the raw spec gives every slot a source (then it needs no ``[processes]``).
    Read before validation: a malformed section counts as no source, and the section's
    own errors are reported where it is checked."""
    if not isinstance(top, Mapping):
        return False
    default = isinstance(top.get("source"), Mapping)
    slots = top.get("slots")
    if not isinstance(slots, Mapping) or not slots:
        return False
    for raw in slots.values():
        if not isinstance(raw, Mapping) or raw.get("backend") != "kubernetes":
            return False
        if not (default or isinstance(raw.get("source"), Mapping)):
            return False
    return True
