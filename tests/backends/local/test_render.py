"""The renderer is pure: spec + release -> units. No I/O, so these are plain data tests."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from shipway.backends.local.render import default_host, render
from shipway.release.model import ImageMeta, Release, ReleaseStatus
from shipway.spec.parse import parse

SPEC = {
    "app": {"name": "shop"},
    "processes": {
        "web": {"command": "python3 app.py", "port": 8000,
                "healthcheck": {"path": "/up", "interval": "200ms", "attempts": 5}},
        "worker": {"command": ["python3", "worker.py"]},
        "clock": {"command": "python3 clock.py", "healthcheck": {"path": False,
                                                                 "initial_delay": "3s"}},
        "api": {"command": "python3 api.py", "port": 9000},
    },
    "env": {"MODE": "prod"},
    "secrets": {"API_TOKEN": {"from_env": "SHOP_TOKEN"}},
    "files": {
        "config/app.ini": "mode = prod\n",
        "config/secret.ini": "token = ${secrets.API_TOKEN}\n",
    },
}


def release(revision: int = 3, ids: dict[str, str] | None = None) -> Release:
    return Release(
        app="shop",
        slot="local",
        revision=revision,
        status=ReleaseStatus.PENDING,
        image="local:/src/shop@sha256:abc",
        digest="sha256:abc",
        image_meta=ImageMeta("local", "/src/shop"),
        deployment_ids=ids or {p: "D1" for p in ("web", "worker", "clock", "api")},
    )


def test_units_keys_phases_and_roles() -> None:
    a = parse(SPEC, base_dir=Path("/src/shop"))
    art = render(a, a.slots.get("local"), release(), 8800)
    by_key = {u.key: u for u in art}
    assert list(by_key) == [
        "snapshot",
        "program/web@D1",
        "program/worker@D1",
        "program/clock@D1",
        "program/api@D1",
        "route/shop.localhost",
    ]
    snap = by_key["snapshot"]
    assert (snap.phase, snap.waits, snap.switches) == (0, False, False)
    assert snap.body["revision"] == 3 and snap.body["digest"] == "sha256:abc"
    assert snap.body["source"] == "/src/shop"
    web = by_key["program/web@D1"]
    # programs start beside the old ones: they wait (health gate) but never switch
    assert (web.phase, web.waits, web.switches, web.process) == (1, True, False, "web")
    assert web.body["command"] == ["python3", "app.py"]
    assert web.body["snapshot"] == "sha256:abc"
    route = by_key["route/shop.localhost"]
    assert (route.phase, route.switches, route.waits) == (2, True, False)
    assert route.body == {
        "host": "shop.localhost",
        "process": "web",
        "program": "program/web@D1",
        "router_port": 8800,
    }


def test_health_gate_of_each_kind_of_process() -> None:
    a = parse(SPEC, base_dir=Path("/src/shop"))
    art = render(a, a.slots.get("local"), release(), 8800)
    health = {u.process: u.body["health"] for u in art if u.kind == "program"}
    assert health["web"]["mode"] == "http"
    assert health["web"]["path"] == "/up"
    assert health["web"]["interval"] == 0.2 and health["web"]["attempts"] == 5
    # a port but no declared check: the port must accept connections
    assert health["api"]["mode"] == "tcp"
    # no port: the process must stay up for its initial delay (at least a second)
    assert health["clock"] == {"mode": "uptime", "initial_delay": 3.0}
    assert health["worker"] == {"mode": "uptime", "initial_delay": 1.0}


def test_secrets_are_placeholders_and_secret_files_are_0600() -> None:
    a = parse(SPEC, base_dir=Path("/src/shop"))
    art = render(a, a.slots.get("local"), release(), 8800)
    web = art.get("program/web@D1")
    assert web.body["env"]["API_TOKEN"] == "${secrets.API_TOKEN}"
    assert web.body["env"]["MODE"] == "prod"
    assert web.body["env"]["SHIPWAY_RELEASE"] == "r3"
    files = {f["path"]: f for f in art.get("snapshot").body["files"]}
    assert files["config/secret.ini"]["mode"] == "0600"
    assert files["config/app.ini"]["mode"] == "0644"
    assert "${secrets.API_TOKEN}" in files["config/secret.ini"]["content"]


def test_targeted_restart_leaves_other_programs_byte_identical() -> None:
    a = parse(SPEC, base_dir=Path("/src/shop"))
    slot = a.slots.get("local")
    before = render(a, slot, release(3), 8800)
    ids = {"web": "D2", "worker": "D1", "clock": "D1", "api": "D1"}
    after = render(a, slot, release(4, ids), 8800)
    old = {u.key: u for u in before}
    new = {u.key: u for u in after}
    assert "program/web@D2" in new and "program/web@D1" not in new
    # the route follows the restarted process to its new program
    assert new["route/shop.localhost"].body["program"] == "program/web@D2"
    # worker's unit differs only by SHIPWAY_RELEASE between renders; the engine keeps the
    # recorded unit for untargeted processes, so what matters is the key staying put:
    assert "program/worker@D1" in new
    same_release = render(a, slot, replace(release(3), deployment_ids=ids), 8800)
    again = {u.key: u for u in same_release}
    assert again["program/worker@D1"].digest == old["program/worker@D1"].digest


def test_default_host_scheme_and_declared_routes() -> None:
    assert default_host("shop", "local") == "shop.localhost"
    assert default_host("shop", "staging") == "staging.shop.localhost"
    routed = parse(
        {**SPEC, "routes": [{"host": "shop.example.com", "process": "api"}]},
        base_dir=Path("/src/shop"),
    )
    art = render(routed, routed.slots.get("local"), release(), 9900)
    routes = [u for u in art if u.kind == "route"]
    assert [u.key for u in routes] == ["route/shop.example.com"]
    assert routes[0].body["program"] == "program/api@D1"
    assert routes[0].body["router_port"] == 9900


def test_no_web_process_means_no_default_route() -> None:
    spec = {**SPEC, "processes": {"worker": {"command": "python3 worker.py"}}}
    a = parse(spec, base_dir=Path("/src/shop"))
    art = render(a, a.slots.get("local"), release(ids={"worker": "D1"}), 8800)
    assert [u.kind for u in art] == ["snapshot", "program"]


def test_render_is_deterministic_json() -> None:
    a = parse(SPEC, base_dir=Path("/src/shop"))
    one = render(a, a.slots.get("local"), release(), 8800)
    two = render(a, a.slots.get("local"), release(), 8800)
    assert json.dumps(one.to_json()) == json.dumps(two.to_json())


def test_a_generation_is_its_own_snapshot_and_programs_labelled_with_it_and_no_route() -> None:
    a = parse(SPEC, base_dir=Path("/src/shop"))
    slot = a.slots.get("local")
    rolling = render(a, slot, release(), 8800)
    gen = render(a, slot, replace(release(), generation="local-20260101-000000"), 8800)
    assert gen.keys() == [
        "gen/local-20260101-000000/snapshot",
        "gen/local-20260101-000000/program/web@D1",
        "gen/local-20260101-000000/program/worker@D1",
        "gen/local-20260101-000000/program/clock@D1",
        "gen/local-20260101-000000/program/api@D1",
    ]  # hosts move by PointHost, never by a unit
    assert {u.generation for u in gen} == {"local-20260101-000000"}
    assert {u.body["generation"] for u in gen} == {"local-20260101-000000"}
    # a rolling release renders exactly as before (no generation key in any body)
    assert all(u.generation is None and "generation" not in u.body for u in rolling)
