"""Drift on the hosts, seen by the plan (per host) and repaired: a changed config file, a
removed or stopped container, a container nobody declared; a saved plan refused once the
hosts changed; a failure on the second host after the first one switched.

``repair`` re-asserts the deployed release by key (only drift changes); ``deploy`` rolls
new containers beside the old ones, and repairs the shared units (files, proxy) on the way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from shipway import api
from shipway.backends.docker.execs import run_in
from shipway.engine import Rolled, RolledBack, Unchanged
from shipway.errors import BackendError, StalePlan
from shipway.guard import Guard
from shipway.plan.model import ApplyObject, NoOp, Plan, Remove
from shipway.release.model import ReleaseStatus
from tests.backends.docker.conftest import SLOT, Deployment, Lines

FILES = """
[secrets]
TOKEN = { from_env = "RECONCILE_TOKEN" }

[files]
"config/app.ini" = "token=${secrets.TOKEN}\\nmode=strict\\n"
"""


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "tok-8c1f2e9a77"
    monkeypatch.setenv("RECONCILE_TOKEN", value)
    return value


def applies(plan: Plan) -> dict[str, str]:
    return {s.unit: s.action for s in plan.steps if isinstance(s, ApplyObject)}


def removes(plan: Plan) -> set[str]:
    return {s.unit for s in plan.steps if isinstance(s, Remove)}


def repair(deployment: Deployment, lines: Lines | None = None) -> object:
    return api.repair(deployment.app(), SLOT, reporter=lines or Lines(), timeout=120)


def test_repairing_what_runs_as_recorded_changes_nothing(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    ids = {c.id for c in deployment.containers(env.a, kind="app")}
    plan = api.plan(deployment.app(), SLOT, repair=True)
    assert [type(s) for s in plan.steps] == [NoOp] and plan.unchanged
    assert isinstance(repair(deployment), Unchanged)  # "no changes": no revision recorded
    assert {c.id for c in deployment.containers(env.a, kind="app")} == ids
    assert [r.revision for r in api.history(deployment.app(), SLOT)] == [1]


def test_config_file_drift_is_seen_per_host_and_repaired(
    deployment: Deployment, token: str
) -> None:
    env = deployment.env
    deployment.write(extra=FILES)
    assert isinstance(deployment.deploy(), Rolled)
    (web_b,) = deployment.containers(env.b, kind="app")
    assert run_in(web_b, ["cat", "/app/config/app.ini"])[1].decode() == (
        f"token={token}\nmode=strict\n"
    )
    # someone edits the file on host B, behind shipway's back
    client = deployment.local(env.b)
    (volume,) = client.volumes.list(
        filters={"label": [f"org.shipway.app={deployment.name}", "org.shipway.kind=files"]}
    )
    Path(volume.attrs["Mountpoint"], "config", "app.ini").write_text("token=x\nmode=lax\n")
    client.close()

    # a deploy would rewrite the files too (same content, same volume), beside rolling
    deploy_plan = api.plan(deployment.app(), SLOT)
    assert any(k.startswith("files/") and a == "update" for k, a in applies(deploy_plan).items())
    plan = api.plan(deployment.app(), SLOT, repair=True)
    drift = applies(plan)
    files_b = next(k for k in drift if k.startswith("files/") and k.endswith(f"@{env.b.address}"))
    web_key = next(k for k in drift if k.startswith("container/web.1/"))
    assert drift == {files_b: "update", web_key: "update"}
    assert web_key.endswith(f"@{env.b.address}")  # host A is untouched
    detail = "\n".join(api.object_diff(deployment.app(), SLOT, plan))
    assert f"{files_b} drifted: file config/app.ini: content differs" in detail
    assert "mode=lax" not in detail and token not in detail  # never a value
    assert "NOT zero-downtime" in detail  # the in-place replacement says so

    web_a_ids = {c.id for c in deployment.containers(env.a, kind="app")}
    assert isinstance(repair(deployment), Rolled)
    (web_b,) = deployment.containers(env.b, kind="app")
    assert run_in(web_b, ["cat", "/app/config/app.ini"])[1].decode() == (
        f"token={token}\nmode=strict\n"
    )
    assert {c.id for c in deployment.containers(env.a, kind="app")} == web_a_ids
    assert [type(s) for s in api.plan(deployment.app(), SLOT, repair=True).steps] == [NoOp]


def test_removed_container_recreated_stopped_started_undesired_removed(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write(
        processes="""
[processes.web]
port = 8080
replicas = 2
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
"""
    )
    assert isinstance(deployment.deploy(), Rolled)
    a_webs = sorted(deployment.containers(env.a, kind="app"), key=lambda c: c.name)
    b_webs = sorted(deployment.containers(env.b, kind="app"), key=lambda c: c.name)
    gone_key = a_webs[0].labels["org.shipway.key"]
    stopped_key = b_webs[1].labels["org.shipway.key"]
    kept_id = a_webs[1].id
    a_webs[0].remove(force=True)  # a container removed by hand
    b_webs[1].stop(timeout=2)  # one stopped
    stray = deployment.local(env.a).containers.run(  # one nobody declared (a leftover)
        env.images.v1,
        detach=True,
        name=f"{deployment.name}-leftover",
        labels={
            "org.shipway.app": deployment.name,
            "org.shipway.slot": SLOT,
            "org.shipway.kind": "app",
            "org.shipway.key": "container/web.3/20200101000000-000000@docker-a",
        },
    )
    plan = api.plan(deployment.app(), SLOT, repair=True)
    assert applies(plan) == {gone_key: "create", stopped_key: "start"}
    assert removes(plan) == {"container/web.3/20200101000000-000000@docker-a"}
    # per host: the plan's lines name the host of every step
    lines_of = plan.describe()
    assert any(gone_key in line and line.endswith("on docker-a") for line in lines_of)
    assert any(stopped_key in line and line.endswith(f"on {env.b.address}") for line in lines_of)

    assert isinstance(repair(deployment), Rolled)
    assert stray.id not in {c.id for c in deployment.containers(env.a)}
    keys_a = {c.labels["org.shipway.key"]: c for c in deployment.containers(env.a, kind="app")}
    assert gone_key in keys_a and keys_a[gone_key].status == "running"
    assert kept_id in {c.id for c in keys_a.values()}  # the healthy one was left alone
    states = {
        c.labels["org.shipway.key"]: c.status for c in deployment.containers(env.b, kind="app")
    }
    assert states[stopped_key] == "running"
    assert [r.status for r in api.history(deployment.app(), SLOT)] == [
        ReleaseStatus.SUPERSEDED,
        ReleaseStatus.DEPLOYED,
    ]


def test_a_saved_plan_is_refused_when_a_host_changed(
    deployment: Deployment, tmp_path: Path
) -> None:
    env = deployment.env
    deployment.write()
    assert isinstance(deployment.deploy(), Rolled)
    saved = api.plan(deployment.app(), SLOT, image=env.images.v2)
    saved = Plan.from_json(json.loads(json.dumps(saved.to_json())))
    (web_b,) = deployment.containers(env.b, kind="app")
    web_b.stop(timeout=2)
    with pytest.raises(StalePlan) as exc:
        deployment.deploy(saved_plan=saved)
    assert any("changed" in c and web_b.labels["org.shipway.key"] in c for c in exc.value.changes)
    assert deployment.get(env.a) == (200, "v1\n")


def test_failure_on_the_second_host_rolls_back_the_first(deployment: Deployment) -> None:
    """Policy: stop at the first failure and put back every host already switched."""
    env = deployment.env
    deployment.write()
    assert isinstance(deployment.deploy(), Rolled)
    old = {h.name: {c.id for c in deployment.containers(h, kind="app")} for h in (env.a, env.b)}

    def break_b() -> None:
        # host A has switched to v2; host B's proxy goes away right before its switch
        for c in deployment.containers(env.b, kind="proxy"):
            c.remove(force=True)

    lines = Lines()
    lines.on(f"update route/web@{env.b.address}", break_b)
    outcome = deployment.deploy(lines, image=env.images.v2)
    assert isinstance(outcome, RolledBack), outcome.line()
    text = lines.text()
    switched_a = text.index("update route/web@docker-a")
    assert switched_a < text.index(f"update route/web@{env.b.address}")
    assert "host docker-a: started" in text and "switched all requests" in text
    # the per-host report, at the end: A switched to r2 and back to r1; B failed, repaired
    report = text[text.index("what happened on each host:") :].splitlines()
    line_a = next(line for line in report if line.startswith("  host docker-a: "))
    line_b = next(line for line in report if line.startswith(f"  host {env.b.address}: "))
    assert line_a.count("switched all requests") == 2
    assert "update route/web@" in line_b and "FAILED" in line_b and "started proxy" in line_b
    # both hosts serve the old release again, from the very same containers
    for host in (env.a, env.b):
        assert deployment.get(host) == (200, "v1\n")
        assert {c.id for c in deployment.containers(host, kind="app")} == old[host.name]
    assert [r.status for r in api.history(deployment.app(), SLOT)] == [
        ReleaseStatus.DEPLOYED,
        ReleaseStatus.FAILED,
    ]


def test_cli_plan_shows_the_repair_per_host(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write()
    assert isinstance(deployment.deploy(), Rolled)
    (web_b,) = deployment.containers(env.b, kind="app")
    web_b.stop(timeout=2)
    key = web_b.labels["org.shipway.key"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "shipway",
            "-f",
            str(deployment.spec_file),
            "plan",
            SLOT,
            "--repair",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"start {key} on {env.b.address}" in out
    assert f"repair {deployment.name} to slot {SLOT}" in out
    assert "per host:" in out
    assert f"  docker-a ({env.a.url}): no change" in out
    assert f"  {env.b.address} ({env.b.url}): 1 start, 1 wait-rollout" in out


def test_a_replacement_whose_image_cannot_be_had_leaves_the_old_container_running(
    deployment: Deployment,
) -> None:
    env = deployment.env
    app = deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    backend = deployment.backend()
    target = app.slots.target(SLOT)
    clearance = Guard(app.slots).clear(SLOT)
    (release,) = backend.read_records(target)
    missing = env.images.v1.rsplit(":", 1)[0] + ":no-such-tag"  # the test registry has none
    before = {c.name: c.id for c in deployment.containers(env.a)}
    for kind in ("container", "proxy"):
        (unit,) = [u for u in release.artifact if u.kind == kind]
        replacement = replace(unit, body={**unit.body, "image": missing})
        with pytest.raises(BackendError, match="no-such-tag"):
            backend.apply(clearance, target, replacement, "update", {}, Lines())
        name = str(unit.body["name"])
        (c,) = [c for c in deployment.containers(env.a) if c.name == name]
        assert (c.id, c.status) == (before[name], "running"), kind
    assert deployment.get(env.a) == (200, "v1\n")  # still served, through the old proxy


@pytest.mark.parametrize("kind", ["app", "files"])  # files: observed from the sparse list
def test_a_labelled_container_without_a_unit_key_is_really_removed_by_repair(
    deployment: Deployment, kind: str
) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    # a container labelled as the slot's, but with no unit key (made by hand, or by an
    # older shipway): nothing declares it, and a repair must remove it for real
    stray = deployment.local(env.a).containers.run(
        env.images.v1,
        detach=True,
        name=f"{deployment.name}-unknown",
        labels={
            "org.shipway.app": deployment.name,
            "org.shipway.slot": SLOT,
            "org.shipway.kind": kind,
        },
    )
    key = f"unknown/{deployment.name}-unknown@docker-a"
    assert removes(api.plan(deployment.app(), SLOT, repair=True)) == {key}

    lines = Lines()
    assert isinstance(repair(deployment, lines), Rolled), lines.text()
    assert stray.id not in {c.id for c in deployment.containers(env.a)}, lines.text()
    assert f"{key} already gone" not in lines.text()
    assert removes(api.plan(deployment.app(), SLOT, repair=True)) == set()
