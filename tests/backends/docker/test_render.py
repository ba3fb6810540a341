"""The Docker renderer (pure): which units each host gets, and what they say."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shipway.backends.docker import caddy, drift, labels
from shipway.backends.docker.machines import addresses
from shipway.backends.docker.render import render, resources_of, routed_processes
from shipway.errors import InputError
from shipway.release.artifact import Artifact
from shipway.release.model import ImageMeta, Release, ReleaseStatus
from shipway.spec.model import DockerHost, Resources
from tests.conftest import app_from_toml

SPEC = """
[app]
name = "shop"
image = "reg.example:5000/shop:1"

[processes.web]
port = 8000
replicas = 2
[processes.web.resources]
requests = { cpu = "250m", memory = "128Mi" }
limits = { cpu = "1.5", memory = "512Mi" }

[processes.worker]
command = "work --queue default"

[env]
LOG_LEVEL = "info"

[secrets]
TOKEN = { from_env = "SHOP_TOKEN" }

[files]
"config/app.ini" = "token=${secrets.TOKEN}\\n"
"config/plain.txt" = "hello\\n"

[slots.prod]
backend = "docker"
hosts = [
  "ssh://deploy@web1.invalid",
  { url = "ssh://deploy@web2.invalid:2222", processes = ["web"] },
]
proxy_port = 8080
drain_timeout = "2s"
routes = [{ host = "shop.example.com", process = "web" }]
"""


def release(**kw: object) -> Release:
    base = Release(
        app="shop",
        slot="prod",
        revision=3,
        status=ReleaseStatus.PENDING,
        image="reg.example:5000/shop:1",
        digest="sha256:" + "ab" * 32,
        image_meta=ImageMeta("dockerfile", "/srv"),
        deployment_ids={"web": "20261129-aaaaaa", "worker": "20261129-aaaaaa"},
        config_hash="c0ffee",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def artifact(spec: str = SPEC, **kw: object) -> Artifact:
    app = app_from_toml(spec)
    slot = app.slots.get("prod")
    return render(app.in_slot("prod"), slot, release(**kw))


def test_units_per_host_follow_the_roles() -> None:
    keys = artifact().keys()
    web1 = [k for k in keys if k.endswith("@web1.invalid")]
    web2 = [k for k in keys if k.endswith("@web2.invalid:2222")]
    assert sorted(k.split("/")[0].split("@")[0] for k in web1) == [
        "container",
        "container",
        "container",
        "files",
        "proxy",
        "route",
    ]
    # web2 runs web only: no worker there
    assert not any("worker" in k for k in web2)
    assert "container/web.2/20261129-aaaaaa@web2.invalid:2222" in web2
    assert "route/web@web2.invalid:2222" in web2


def test_containers_start_beside_the_old_ones_and_routes_switch() -> None:
    units = {u.key: u for u in artifact()}
    web = units["container/web.1/20261129-aaaaaa@web1.invalid"]
    assert (web.waits, web.switches, web.phase) == (True, False, 1)
    assert web.body["name"] == "shop-prod-web-1-20261129-aaaaaa"
    route = units["route/web@web1.invalid"]
    assert (route.waits, route.switches, route.phase) == (False, True, 2)
    assert route.body["upstreams"] == [
        "shop-prod-web-1-20261129-aaaaaa:8000",
        "shop-prod-web-2-20261129-aaaaaa:8000",
    ]
    assert route.body["hosts"] == ["shop.example.com"]
    proxy = units["proxy@web1.invalid"]
    assert proxy.body["port"] == 8080 and route.body["drain"] == 2.0 and proxy.waits
    assert proxy.body["name"] == route.body["proxy"] == "shipway-proxy-8080"
    assert "drain" not in proxy.body  # nothing of the slot's: every slot's is the same


def test_a_container_body_runs_the_image_by_digest_with_env_files_and_limits() -> None:
    units = {u.key: u for u in artifact()}
    web = units["container/web.1/20261129-aaaaaa@web1.invalid"].body
    assert web["image"] == "reg.example:5000/shop@sha256:" + "ab" * 32
    assert web["env"] == {"LOG_LEVEL": "info", "PORT": "8000", "TOKEN": "${secrets.TOKEN}"}
    assert web["mounts"] == [
        {"file": "config/app.ini", "target": "/srv/config/app.ini"},
        {"file": "config/plain.txt", "target": "/srv/config/plain.txt"},
    ]
    assert web["resources"] == {
        "memory": 512 * 2**20,
        "memory_reservation": 128 * 2**20,
        "nano_cpus": 1_500_000_000,
        "cpu_shares": 256,
    }
    worker = units["container/worker.1/20261129-aaaaaa@web1.invalid"].body
    assert worker["args"] == ["work", "--queue", "default"] and worker["entrypoint"] is None
    assert "PORT" not in worker["env"] and worker["port"] is None
    assert worker["health"] == {"mode": "uptime", "initial_delay": 1.0}
    files = next(u for u in artifact() if u.kind == "files").body
    assert [f["mode"] for f in files["files"]] == ["0600", "0644"]  # secret-bearing: 0600


def test_no_secret_value_is_ever_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOP_TOKEN", "tok-must-not-appear")
    assert "tok-must-not-appear" not in json.dumps(artifact().to_json())


@pytest.mark.parametrize(
    ("meta", "entrypoint", "args"),
    [
        (ImageMeta("herokuish", "/app"), ["/start"], ["web"]),
        (ImageMeta("pack", "/workspace"), ["/cnb/process/web"], []),
        (ImageMeta("dockerfile", "/app"), None, None),
    ],
)
def test_start_command_follows_the_image_type(
    meta: ImageMeta, entrypoint: list[str] | None, args: list[str] | None
) -> None:
    units = {u.key: u for u in artifact(image_meta=meta)}
    web = units["container/web.1/20261129-aaaaaa@web1.invalid"].body
    assert (web["entrypoint"], web["args"]) == (entrypoint, args)
    assert web["mounts"][0]["target"] == f"{meta.working_dir}/config/app.ini"


def test_a_restart_id_changes_only_that_process_units() -> None:
    before = {u.key: u.digest for u in artifact()}
    after = {
        u.key: u.digest
        for u in artifact(deployment_ids={"web": "20261130-bbbbbb", "worker": "20261129-aaaaaa"})
    }
    same = {k for k in before if before.get(k) == after.get(k)}
    assert {k for k in same if "worker" in k} == {k for k in before if "worker" in k}
    assert not any(k.startswith("container/web.") for k in same)
    assert "route/web@web1.invalid" not in same  # the route moves to the new containers
    assert "proxy@web1.invalid" in same and any(k.startswith("files/") for k in same)


def test_config_change_gives_a_new_files_volume() -> None:
    a = next(u for u in artifact() if u.kind == "files")
    b = next(u for u in artifact(config_hash="another") if u.kind == "files")
    assert a.key != b.key and a.body["volume"] != b.body["volume"]


def test_without_routes_the_first_process_with_a_port_takes_every_request() -> None:
    spec = SPEC.replace('routes = [{ host = "shop.example.com", process = "web" }]', "")
    app = app_from_toml(spec)
    assert routed_processes(app.in_slot("prod")) == {"web": ()}
    route = next(u for u in artifact(spec) if u.kind == "route")
    assert route.body["hosts"] == []


def test_render_is_pure_hosts_are_never_contacted() -> None:
    # the hosts do not exist; rendering works all the same
    assert len(artifact()) > 0


def test_resources_quantities() -> None:
    r = resources_of(Resources(cpu_request="2", memory_limit="1G"))
    assert r == {"memory": 10**9, "memory_reservation": None, "nano_cpus": None, "cpu_shares": 2048}


def test_host_names() -> None:
    hosts = addresses(
        [
            DockerHost("unix:///var/run/docker.sock"),
            DockerHost("unix:///run/x/docker-a.sock"),
            DockerHost("ssh://u@h1"),
            DockerHost("ssh://u@h1:2222"),
        ]
    )
    assert [h.name for h in hosts] == ["local", "docker-a", "h1", "h1:2222"]
    twins = addresses([DockerHost("unix:///a/docker.sock"), DockerHost("unix:///b/docker.sock")])
    assert [h.name for h in twins] == ["unix:///a/docker.sock", "unix:///b/docker.sock"]
    with pytest.raises(InputError, match="listed twice"):
        addresses([DockerHost("ssh://u@h1"), DockerHost("ssh://u@h1")])
    with pytest.raises(InputError, match="only unix:// and ssh://"):
        addresses([DockerHost("tcp://h1:2375")])


def test_an_ssh_url_may_name_the_engines_socket_on_the_host() -> None:
    bare, named, port = addresses(
        [
            DockerHost("ssh://u@h1"),
            DockerHost("ssh://u@h2/run/user/1000/docker.sock"),
            DockerHost("ssh://u@h3:2222/var/run/docker.sock"),
        ]
    )
    assert (bare.path, bare.engine_url) == (None, "ssh://u@h1")
    # the name, and so every unit key, is the host's with or without the path
    assert (named.name, named.path) == ("h2", "/run/user/1000/docker.sock")
    assert named.engine_url == "ssh://u@h2"  # the Docker SDK takes no path after the host
    assert (port.name, port.path, port.engine_url) == (
        "h3:2222",
        "/var/run/docker.sock",
        "ssh://u@h3:2222",
    )
    assert addresses([DockerHost("ssh://u@h1/")])[0].path is None
    with pytest.raises(InputError, match="the engine's socket"):
        addresses([DockerHost("ssh://u@h1/run/docker.sock?x=1")])


def test_caddy_config_orders_host_routes_before_the_catch_all() -> None:
    routes = {
        "route/api@h": {"key": "route/api@h", "body": {"hosts": [], "upstreams": ["a:1"]}},
        "route/web@h": {
            "key": "route/web@h",
            "body": {"hosts": ["x.example"], "upstreams": ["w:2"]},
        },
    }
    config = caddy.compose(
        routes, {"drain": 2, "stop_timeout": 10, "listen": 80}, "shipway-proxy-x"
    )
    http = config["apps"]["http"]
    assert http["grace_period"] == "12000ms"
    server = http["servers"]["shipway"]
    assert server["listen"] == [":80"] and server["automatic_https"] == {"disable": True}
    # the last route: the answer for a host no route serves
    matches = [r.get("match") for r in server["routes"]]
    assert matches == [[{"host": ["x.example"]}], None, None]
    assert server["routes"][-1] == caddy.UNKNOWN_HOST
    assert server["errors"]["routes"] == [caddy.RELEASE_DOWN]
    handler = server["routes"][1]["handle"][0]
    assert handler["upstreams"] == [{"dial": "a:1"}]
    assert handler["load_balancing"]["try_duration"] == "5000ms"
    # the admin API never on the network: a unix socket in the proxy's volume, and the
    # server names the proxy it belongs to (what the socket is asked before a load)
    assert config["admin"]["listen"] == "unix//etc/shipway/admin.sock"
    assert server["@id"] == "shipway-proxy-x"
    before = caddy.compose(routes, {"listen": 80}, None)  # as composed before the socket
    assert before["admin"]["listen"] == "localhost:2019"
    assert "@id" not in before["apps"]["http"]["servers"]["shipway"]


def test_drift_reasons_never_carry_values() -> None:
    body = {
        "kind": "app",
        "name": "c",
        "image": "img",
        "env": {"A": "1", "TOKEN": "${secrets.TOKEN}"},
        "labels": {labels.PROCESS: "web"},
        "network": "net",
        "aliases": ["web"],
        "restart": "unless-stopped",
        "resources": {},
        "mounts": [],
        "stop_timeout": 10,
    }
    env = {"A": "2", "TOKEN": "the-real-secret"}
    attrs = {
        "Config": {
            "Image": "img",
            "Env": [f"{k}={v}" for k, v in env.items()],
            "Labels": {labels.PROCESS: "web", labels.ENV_HASH: drift.env_hash("c", env)},
            "StopTimeout": 10,
        },
        "HostConfig": {"RestartPolicy": {"Name": "no"}, "Memory": 0},
        "NetworkSettings": {"Networks": {"net": {"Aliases": ["web"]}}},
        "Mounts": [],
    }
    reasons = drift.container(attrs, body)
    assert "environment variable A differs" in reasons
    assert any("restart policy is 'no'" in r for r in reasons)
    assert not any("the-real-secret" in r or "=2" in r for r in reasons)
    # a secret value changed by hand is still seen, through the hash
    env2 = {"A": "1", "TOKEN": "another"}
    attrs["Config"]["Env"] = [f"{k}={v}" for k, v in env2.items()]  # type: ignore[index]
    attrs["HostConfig"]["RestartPolicy"]["Name"] = "unless-stopped"  # type: ignore[index]
    assert drift.container(attrs, body) == [
        "environment differs from what shipway set (a secret value?)"
    ]


def test_a_second_catch_all_route_on_a_shared_proxy_is_a_clash() -> None:
    anything = {"route/web@h": {"key": "route/web@h", "body": {"hosts": [], "upstreams": []}}}
    named = {"route/web@h": {"key": "route/web@h", "body": {"hosts": ["x"], "upstreams": []}}}
    assert caddy.catch_all_of({"a/p": anything, "b/p": anything}, "b/p") == "a/p"
    assert caddy.catch_all_of({"a/p": anything, "b/p": named}, "b/p") is None
    assert caddy.catch_all_of({"a/p": named, "b/p": anything}, "b/p") is None
    assert caddy.catch_all_of({"b/p": anything}, "b/p") is None
