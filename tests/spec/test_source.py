"""``[slots.NAME.source]`` and the app-level ``[source]``: validated like the rest of the
spec (every error with its key path, exit 2), an app whose slots all take their objects
from a source needs no ``[processes]``, and the section survives a release's snapshot."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from shipway.errors import SpecInvalid
from shipway.spec import load
from shipway.spec.parse import from_snapshot
from shipway.spec.source import ContainerRef, Source

SOURCE_ONLY = """
[app]
name = "shop"

[source]
manifests = ["k8s/", "extra.yaml"]
image_containers = ["Deployment/web", "StatefulSet/db:postgres"]
cluster_scoped = true

[slots.staging]
backend = "kubernetes"

[slots.prod]
backend = "kubernetes"
role = "production"

[slots.prod.source]
chart = "chart"
release = "shop-prod"
values = ["values-prod.yaml"]
set = { "image.tag" = "v2", replicas = 3, resources = { limits = { cpu = "1" } } }
"""


def spec(tmp_path: Path, text: str, files: tuple[str, ...] = ()) -> Path:
    for name in files:
        path = tmp_path / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}\n")
    (tmp_path / "shipway.toml").write_text(textwrap.dedent(text))
    return tmp_path / "shipway.toml"


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecInvalid) as invalid:
        load(path)
    return [f"{p.path}: {p.message}" for p in invalid.value.problems]


FILES = ("k8s/", "extra.yaml", "chart/Chart.yaml", "values-prod.yaml")


def test_an_app_of_sources_needs_no_processes_and_slots_inherit_the_default(
    tmp_path: Path,
) -> None:
    app = load(spec(tmp_path, SOURCE_ONLY, FILES))
    assert app.processes == {}
    staging, prod = app.slots.get("staging"), app.slots.get("prod")
    assert staging.source == Source(
        manifests=("k8s/", "extra.yaml"),
        image_containers=(
            ContainerRef("Deployment", "web"),
            ContainerRef("StatefulSet", "db", "postgres"),
        ),
        cluster_scoped=("*",),
    )
    assert staging.source.allows_cluster_scoped("ClusterRole")
    # a slot's own source replaces the default whole
    assert prod.source is not None and prod.source.chart == "chart"
    assert prod.source.image_containers == () and not prod.source.allows_cluster_scoped("X")
    assert prod.source.set_values() == {
        "image": {"tag": "v2"},
        "replicas": 3,
        "resources": {"limits": {"cpu": "1"}},
    }
    assert prod.source.release_name("shop") == "shop-prod"


def test_the_source_survives_a_release_snapshot_without_its_files(tmp_path: Path) -> None:
    app = load(spec(tmp_path, SOURCE_ONLY, FILES))
    for slot in ("staging", "prod"):
        snapshot = app.in_slot(slot).snapshot(app.slots.get(slot))
        again = from_snapshot(snapshot, tmp_path / "elsewhere")  # no files there
        assert again.slots.get(slot).source == app.slots.get(slot).source


def test_helm_records_says_what_a_take_over_does_to_a_helm_release(tmp_path: Path) -> None:
    removing = SOURCE_ONLY.replace("cluster_scoped = true\n", 'helm_records = "removed"\n')
    app = load(spec(tmp_path, removing, FILES))
    staging = app.slots.get("staging")
    assert staging.source is not None and staging.source.helm_records == "removed"
    again = from_snapshot(app.in_slot("staging").snapshot(staging), tmp_path / "elsewhere")
    assert again.slots.get("staging").source == staging.source
    assert app.slots.get("prod").source.helm_records == "superseded"  # the default
    wrong = SOURCE_ONLY.replace("cluster_scoped = true\n", 'helm_records = "deleted"\n')
    assert problems(spec(tmp_path, wrong, FILES)) == [
        "source.helm_records: 'deleted' is not one of superseded, removed"
    ]


def test_every_problem_of_a_source_is_reported_with_its_key_path(tmp_path: Path) -> None:
    text = """
    [app]
    name = "shop"

    [processes.web]
    command = "serve"

    [slots.a]
    backend = "kubernetes"
    [slots.a.source]
    manifests = ["missing/", 3]
    values = ["v.yaml"]
    image_containers = ["web", "Deployment/web:Bad_Name"]
    cluster_scoped = "yes"
    typo = 1

    [slots.b]
    backend = "kubernetes"
    strategy = "blue-green"
    replicas = { web = 2 }
    [slots.b.source]
    chart = "nochart"
    release = "Not_A_Release"
    set = { "a[0]" = 1 }

    [slots.c]
    backend = "kubernetes"
    [slots.c.source]
    manifests = ["k8s/"]
    chart = "chart"

    [slots.d]
    backend = "docker"
    hosts = ["unix:///var/run/docker.sock"]
    [slots.d.source]
    manifests = ["k8s/"]
    """
    found = problems(spec(tmp_path, text, ("k8s/", "chart/Chart.yaml")))
    assert sorted(found) == sorted(
        [
            "slots.a.source.manifests[0]: missing/: no such file or directory",
            "slots.a.source.manifests[1]: must be a string, not an integer",
            "slots.a.source.values: applies to a chart source only",
            "slots.a.source.image_containers[0]: 'web' is not KIND/NAME[:CONTAINER]",
            "slots.a.source.image_containers[1]: 'Deployment/web:Bad_Name' is not "
            "KIND/NAME[:CONTAINER]",
            "slots.a.source.cluster_scoped: must be true, false or a list of kinds, not a string",
            "slots.a.source.typo: unknown key",
            "slots.b.source.chart: nochart: no such chart directory",
            "slots.b.source.release: 'Not_A_Release' is not a valid release name",
            "slots.b.source.set.\"a[0]\": 'a[0]' is not a values path",
            "slots.b.replicas: does not apply to a slot whose objects come from a source",
            "slots.b.strategy: a slot whose objects come from a source rolls them in place",
            "slots.c.source: needs exactly one of manifests or chart (both are given)",
            "slots.d.source: applies to kubernetes slots only, this slot's backend is docker",
        ]
    )


def test_processes_are_still_required_when_a_slot_has_no_source(tmp_path: Path) -> None:
    text = """
    [app]
    name = "shop"

    [slots.k]
    backend = "kubernetes"
    [slots.k.source]
    manifests = ["k8s/"]

    [slots.local]
    backend = "local"
    """
    assert "processes: at least one process is required" in problems(
        spec(tmp_path, text, ("k8s/",))
    )
