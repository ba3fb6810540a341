"""Golden render cases as files: ``render/<case>.toml`` is a spec plus a ``[release]``
table (slot, image, digest, image_meta, deployment ids, config hash); ``<case>.yaml`` is the
expected list of units. Adding a case needs no code; ``SHIPWAY_UPDATE_GOLDEN=1`` rewrites
the expected files (review the diff before committing it)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from shipway.backends.kubernetes import render
from shipway.release.model import ImageMeta, Release, ReleaseStatus
from shipway.spec import parse

CASES = Path(__file__).parent / "render"
SPECS = sorted(CASES.glob("*.toml"))


def load_case(path: Path) -> tuple[Any, Any, Release]:
    raw = tomllib.loads(path.read_text())
    given = raw.pop("release")
    app = parse(raw, file=path.name)
    slot = app.slots.get(given["slot"])
    view = app.in_slot(slot.name)
    ids = given.get("deployment_ids") or {p: given["deployment_id"] for p in view.processes}
    meta = given.get("image_meta")
    release = Release(
        app=app.name,
        slot=slot.name,
        revision=given.get("revision", 1),
        status=ReleaseStatus.PENDING,
        image=given["image"],
        digest=given.get("digest"),
        image_meta=ImageMeta.from_json(meta) if meta else None,
        deployment_ids=ids,
        config_hash=given["config_hash"],
        generation=given.get("generation"),
    )
    return view, slot, release


def rendered(path: Path) -> list[dict[str, Any]]:
    app, slot, release = load_case(path)
    return [
        {
            "key": u.key,
            "phase": u.phase,
            "process": u.process,
            **({"generation": u.generation} if u.generation else {}),
            "waits": u.waits,
            "switches": u.switches,
            "body": u.body,
        }
        for u in render.render(app, slot, release)
    ]


@pytest.mark.parametrize("case", SPECS, ids=[p.stem for p in SPECS])
def test_golden(case: Path) -> None:
    got = rendered(case)
    expected_file = case.with_suffix(".yaml")
    if os.environ.get("SHIPWAY_UPDATE_GOLDEN"):
        expected_file.write_text(yaml.safe_dump_all(got, sort_keys=False))
    assert got == list(yaml.safe_load_all(expected_file.read_text()))


def test_render_is_deterministic_and_holds_no_secret_values() -> None:
    app, slot, release = load_case(CASES / "full.toml")
    first = render.render(app, slot, release)
    assert first == render.render(app, slot, release)
    text = yaml.safe_dump([u.body for u in first])
    assert "${secrets.DATABASE_URL}" in text and "${secrets.API_TOKEN}" in text


def test_every_object_carries_the_app_labels() -> None:
    app, slot, release = load_case(CASES / "full.toml")
    labels = render.selector_labels("shop", "prod")
    for unit in render.render(app, slot, release):
        if unit.kind == "Namespace":
            continue
        assert labels.items() <= unit.body["metadata"]["labels"].items(), unit.key


def test_template_annotation_changes_with_the_deployment_id_only_for_that_process() -> None:
    app, slot, release = load_case(CASES / "full.toml")
    before = {u.key: u for u in render.render(app, slot, release)}
    ids = dict(release.deployment_ids, worker="20990101000000-ffffff")
    after = {
        u.key: u
        for u in render.render(
            app,
            slot,
            Release(**{**release.__dict__, "deployment_ids": ids}),
        )
    }
    changed = sorted(k for k in before if before[k].digest != after[k].digest)
    assert changed == ["Deployment/shop-worker"]


@pytest.mark.parametrize(
    ("case", "command", "args"),
    [
        ("herokuish", ["/exec"], ["python", "manage.py", "migrate"]),
        ("pack", ["/cnb/lifecycle/launcher"], ["python", "manage.py", "migrate"]),
        ("full", None, ["python", "manage.py", "migrate"]),
    ],
)
def test_the_release_command_job_starts_like_the_image_type_wants(
    case: str, command: list[str] | None, args: list[str]
) -> None:
    app, slot, release = load_case(CASES / f"{case}.toml")
    release = Release(**{**release.__dict__, "artifact": render.render(app, slot, release)})
    job = render.release_job(release, "ns", ["python", "manage.py", "migrate"])
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container.get("command") == command
    assert container["args"] == args
    assert "readinessProbe" not in container and "ports" not in container
    assert "lifecycle" not in container  # no traffic to drain: no preStop sleep
    assert "terminationGracePeriodSeconds" not in job["spec"]["template"]["spec"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert render.COMPONENT not in job["spec"]["template"]["metadata"]["labels"]


TRAFFIC = """
[app]
name = "shop"
image = "r/shop:1"
[processes.web]
port = 8000
[processes.api]
port = 9000
healthcheck = {{ path = "/up" }}
[processes.worker]
command = "work"
[slots.prod]
backend = "kubernetes"
{extra}
"""


def pod_parts(extra: str = "") -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Per process: its Deployment's spec and its container, as rendered."""
    app = parse(tomllib.loads(TRAFFIC.format(extra=extra)))
    slot = app.slots.get("prod")
    release = Release(
        app="shop", slot="prod", revision=1, status=ReleaseStatus.PENDING, image="r/shop:1",
        image_meta=ImageMeta("dockerfile", "/"), deployment_ids=dict.fromkeys(app.processes, "a"),
    )  # fmt: skip
    return {
        u.process or "": (u.body["spec"], u.body["spec"]["template"]["spec"]["containers"][0])
        for u in render.render(app.in_slot("prod"), slot, release)
        if u.kind == "Deployment"
    }


def test_a_serving_pod_drains_before_its_sigterm_and_is_ready_only_once_it_listens() -> None:
    parts = pod_parts()
    for process in ("web", "api"):
        spec, container = parts[process]
        assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
        assert spec["template"]["spec"]["terminationGracePeriodSeconds"] == 35  # 5 + 30
        assert spec["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
        }
    # a port and no healthcheck: ready once the port accepts connections
    assert parts["web"][1]["readinessProbe"]["tcpSocket"] == {"port": 8000}
    assert parts["web"][1]["readinessProbe"]["failureThreshold"] == 30
    assert parts["api"][1]["readinessProbe"]["httpGet"]["path"] == "/up"
    # a worker gets no traffic: nothing to drain, no probe, the cluster's default strategy
    spec, container = parts["worker"]
    assert "lifecycle" not in container and "readinessProbe" not in container
    assert "terminationGracePeriodSeconds" not in spec["template"]["spec"]
    assert "strategy" not in spec


@pytest.mark.parametrize(("given", "sleep"), [('"12s"', 12), ("0.2", 1), ("0", 0)])
def test_the_slots_drain_timeout_is_the_prestop_sleep(given: str, sleep: int) -> None:
    spec, container = pod_parts(f"drain_timeout = {given}")["web"]
    if sleep:
        assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == sleep
        assert spec["template"]["spec"]["terminationGracePeriodSeconds"] == sleep + 30
    else:  # no drain: no preStop, Kubernetes' own grace period
        assert "lifecycle" not in container
        assert "terminationGracePeriodSeconds" not in spec["template"]["spec"]
