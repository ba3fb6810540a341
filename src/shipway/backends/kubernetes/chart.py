"""A chart source: rendered in-process by Helm's own Go SDK, or, without it, a declaration.

With the optional extra ``shipway[helm]`` (helm-python-sdk: Helm v4's Go SDK behind ctypes,
no helm binary, no shell) the chart is rendered offline, as ``helm template`` does it, with
the slot's values: the chart's defaults, then each values file in order, then ``set``. Its
``crds/`` come first; its hooks are left out (shipway runs no Helm hooks, and says so);
``NOTES.txt`` is not an object. What it renders is then applied, waited on, recorded and
rolled back exactly like manifests — shipway's release, not a Helm release. Only here is
helm-python-sdk imported.

Without the extra the chart stays a **declaration**: which chart (name and version, from
its Chart.yaml), release name and values the slot is supposed to run. ``plan`` and
``status`` compare it with the live Helm release of that name (its deployed revision of
that chart, read natively by :mod:`.helm`) and report drift; ``deploy`` refuses with the
fix rather than pretend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from shipway.backends.kubernetes.sources import SourceObject, parse_documents
from shipway.errors import InputError
from shipway.spec.limits import Unreadable, read_regular_file
from shipway.spec.source import Source, merge_values

DECLARED_KIND = "HelmRelease"
DECLARED_API = "shipway.io/declared"
HOOK = "helm.sh/hook"
INSTALL_HINT = (
    "pip install 'shipway[helm]' to render it with Helm's Go SDK, or render it yourself "
    "(helm template) into a manifests source"
)
MAX_VALUES_BYTES = 4 * 1024 * 1024


def helm_missing() -> str | None:
    """Why charts cannot be rendered here (the extra is not installed), or None."""
    try:
        import helm_python  # noqa: F401
    except ImportError as exc:
        return f"helm-python-sdk is not installed ({exc})"
    except OSError as exc:  # its native library cannot be loaded
        return f"helm-python-sdk cannot load Helm's library ({exc})"
    return None


def _yaml_file(path: Path, shown: str) -> Any:
    try:
        text = read_regular_file(path, MAX_VALUES_BYTES).decode("utf-8")
        return yaml.safe_load(text)
    except (Unreadable, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{shown}: cannot be read: {exc}") from exc


def chart_metadata(source: Source, base_dir: Path) -> tuple[str, str]:
    """The chart's name and version, from its Chart.yaml (no Helm needed)."""
    assert source.chart is not None
    meta = _yaml_file(base_dir / source.chart / "Chart.yaml", f"{source.chart}/Chart.yaml")
    if not isinstance(meta, Mapping) or not meta.get("name") or not meta.get("version"):
        raise InputError(f"{source.chart}/Chart.yaml: needs a name and a version")
    return str(meta["name"]), str(meta["version"])


def user_values(source: Source, base_dir: Path) -> dict[str, Any]:
    """The values the slot supplies (Helm's ``config``): each values file merged in order,
    then ``set`` over them."""
    values: dict[str, Any] = {}
    for name in source.values:
        data = _yaml_file(base_dir / name, name)
        if data is None:
            continue
        if not isinstance(data, Mapping):
            raise InputError(f"{name}: a values file must hold a mapping")
        merge_values(values, data)
    return merge_values(values, source.set_values())


def render_chart(
    source: Source, base_dir: Path, release: str, namespace: str
) -> tuple[list[SourceObject], list[str]]:
    """The chart's objects (its CRDs first) and the notes a plan prints (hooks left out).
    Raises InputError when Helm cannot render it (the chart's or the values' fault)."""
    import helm_python

    assert source.chart is not None
    # what TOML or YAML hold beyond JSON (a date) reaches Helm as its text
    values = json.loads(json.dumps(user_values(source, base_dir), default=str))
    problems: list[str] = []
    objects: list[SourceObject] = []
    notes: list[str] = []
    try:
        with helm_python.Chart.load(base_dir / source.chart) as chart:
            crds = chart.crds
            rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    except helm_python.HelmError as exc:
        raise InputError(f"chart {source.chart} cannot be rendered: {exc}") from exc
    for crd in crds:
        objects += parse_documents(crd.get("data", ""), crd.get("filename", "crds"), problems)
    for template, text in sorted(rendered.items()):
        if template.endswith("NOTES.txt") or not text.strip():
            continue
        for obj in parse_documents(text, template, problems):
            hook = ((obj.body.get("metadata") or {}).get("annotations") or {}).get(HOOK)
            if hook:
                notes.append(f"{obj.where}: {obj.kind}/{obj.name} is a Helm hook ({hook}): not run")
                continue
            objects.append(obj)
    if problems:
        raise InputError(
            f"chart {source.chart} renders objects that cannot be applied:\n  "
            + "\n  ".join(problems)
        )
    return objects, notes


def declaration(source: Source, base_dir: Path, release: str) -> dict[str, Any]:
    """The chart as a declaration: what the slot is supposed to run."""
    name, version = chart_metadata(source, base_dir)
    return declared_body(release, name, version, user_values(source, base_dir))


def declared_body(
    release: str, chart: str, version: str, values: Mapping[str, Any]
) -> dict[str, Any]:
    """One shape for the declared chart and the live Helm release, so their digests compare."""
    return {
        "apiVersion": DECLARED_API,
        "kind": DECLARED_KIND,
        "metadata": {"name": release},
        "chart": {"name": chart, "version": version},
        "values": dict(values),
    }
