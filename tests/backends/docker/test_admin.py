"""The switch through Caddy's admin socket in the proxy's volume, on the real engines: a
redeploy moves traffic on both hosts (the local socket, and SSH through the SSH connection)
with no ``exec`` in the proxy; a socket that is another proxy's is never used; a proxy
composed before the socket is reloaded by ``exec`` and has its socket afterwards."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.docker import admin, caddy, drift, labels
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.execs import run_in
from shipway.backends.docker.machines import addresses
from shipway.backends.docker.records import read_tree, tar_of
from shipway.engine import Rolled
from shipway.spec.model import DockerHost as SpecHost
from tests.backends.docker.conftest import SLOT, Deployment, Lines
from tests.backends.local.conftest import eventually
from tests.testenv.docker import DockerHost


def _proxy(deployment: Deployment, host: DockerHost) -> Any:
    (proxy,) = deployment.containers(host, kind=labels.PROXY)
    return proxy


def _execs_in(
    deployment: Deployment, host: DockerHost, container_id: str, since_ns: int
) -> list[str]:
    """The commands exec'd in a container from ``since_ns`` (``time.time_ns()``) on, by
    the engine's own events (their nanosecond times: the API's ``since`` is in seconds)."""
    client = deployment.local(host)
    try:
        found = client.events(
            since=since_ns // 1_000_000_000 - 1,
            until=int(time.time()) + 1,
            filters={"type": "container", "container": container_id},
            decode=True,
        )
        return [
            str(e.get("Action", "")).removeprefix("exec_create: ")
            for e in found
            if str(e.get("Action", "")).startswith("exec_create")
            and int(e.get("timeNano", 0)) >= since_ns
        ]
    finally:
        client.close()


def _route_drift(deployment: Deployment, app: Any) -> list[str]:
    """The slot's route units an observe finds drifted."""
    backend = deployment.backend()
    try:
        backend.observe(app.slots.target(SLOT))
        return [k for k in backend.drift if k.startswith("route/")]
    finally:
        backend.close()


def _connection(deployment: Deployment, host: DockerHost) -> HostConnection:
    (address,) = addresses([SpecHost(host.url)])
    return HostConnection(
        address, known_hosts=str(deployment.env.known_hosts), base_dir=deployment.dir
    )


def test_a_redeploy_switches_both_hosts_through_the_admin_socket_with_no_exec(
    deployment: Deployment, ssh_env: dict[str, str]
) -> None:
    env = deployment.env
    deployment.write()
    assert isinstance(deployment.deploy(), Rolled)
    proxies = {h.name: _proxy(deployment, h) for h in (env.a, env.b)}
    since = time.time_ns()
    outcome = deployment.deploy(Lines(), image=env.images.v2)
    assert isinstance(outcome, Rolled), outcome.line()
    for h in (env.a, env.b):
        assert deployment.get(h) == (200, "v2\n")
        assert _execs_in(deployment, h, proxies[h.name].id, since) == [], h.name  # no reload exec
        # what the proxy runs is what its volume holds: the config names this proxy
        tree = read_tree(proxies[h.name], caddy.CONFIG_DIR)
        assert admin.identity(proxies[h.name].id).encode() in tree[caddy.CONFIG_FILE][0]


def test_a_socket_that_is_another_proxys_is_never_loaded(
    deployment: Deployment, ssh_env: dict[str, str]
) -> None:
    """Engine A's proxy socket, asked to load a config for engine B's proxy (as when a path
    here is not the engine's own): refused as not this proxy's, and A keeps serving."""
    env = deployment.env
    deployment.write()
    assert isinstance(deployment.deploy(), Rolled)
    proxy_a, proxy_b = _proxy(deployment, env.a), _proxy(deployment, env.b)
    path = admin.host_socket(proxy_a, caddy.CONFIG_DIR)
    assert path is not None
    conn = _connection(deployment, env.a)
    try:
        empty = caddy.dumps(caddy.compose({}, {"listen": 80}, admin.identity(proxy_b.id)))
        with pytest.raises(admin.Unusable, match="not this proxy's admin API"):
            admin.load(conn, path, str(proxy_b.id), empty)
        # its own id: a config Caddy refuses is said, and the old one still serves
        with pytest.raises(admin.Refused):
            admin.load(conn, path, str(proxy_a.id), b'{"apps": {"http": {"servers": 7}}}')
    finally:
        conn.close()
    assert deployment.get(env.a) == (200, "v1\n")


def test_a_proxy_composed_before_the_socket_reloads_by_exec_then_has_its_socket(
    deployment: Deployment,
) -> None:
    env = deployment.env
    app = deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    proxy = _proxy(deployment, env.a)
    # the proxy as an older shipway left it: its admin API on its own loopback
    routes = caddy.flatten(caddy.parse_parts(read_tree(proxy, caddy.CONFIG_DIR)))
    body, _ = drift.body_of(proxy.labels)
    old = caddy.dumps(caddy.compose(routes, body or {}, None))
    proxy.put_archive(caddy.CONFIG_DIR, tar_of({caddy.CONFIG_FILE: (old, 0o644)}))
    # nor the file that says which config was loaded (an older shipway wrote none)
    volume = next(m for m in proxy.attrs["Mounts"] if m["Destination"] == caddy.CONFIG_DIR)
    Path(volume["Source"], caddy.LOADED_FILE).unlink()
    config = f"{caddy.CONFIG_DIR}/{caddy.CONFIG_FILE}"
    now = f"unix/{caddy.CONFIG_DIR}/{caddy.ADMIN_SOCKET}"
    reload = ["caddy", "reload", "--config", config, "--address", now]
    assert run_in(proxy, reload)[0] == 0
    assert _route_drift(deployment, app) == []  # taken as up to date
    since = time.time_ns()
    outcome = deployment.deploy(Lines(), image=env.images.v2)
    assert isinstance(outcome, Rolled), outcome.line()
    assert deployment.get(env.a) == (200, "v2\n")
    assert any(e.startswith("caddy reload") for e in _execs_in(deployment, env.a, proxy.id, since))
    # the next switch has the socket: Caddy there answers for this proxy
    path = admin.host_socket(proxy, caddy.CONFIG_DIR)
    assert path is not None
    conn = _connection(deployment, env.a)
    try:
        now = read_tree(proxy, caddy.CONFIG_DIR)[caddy.CONFIG_FILE][0]
        assert admin.identity(proxy.id).encode() in now
        admin.load(conn, path, str(proxy.id), now)
    finally:
        conn.close()
    # a request at the reload itself may find the old server closing (docs/docker.md)
    eventually(lambda: deployment.get(env.a) == (200, "v2\n"), what="the reloaded proxy")


def test_a_proxy_composed_before_the_canary_split_is_up_to_date_until_its_next_change(
    deployment: Deployment,
) -> None:
    """A shared proxy whose config an older shipway composed (its entries proxied without
    a canary's split, no access log) is not drift; the next change loads the split once."""
    env = deployment.env
    app = deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    proxy = _proxy(deployment, env.a)
    tree = read_tree(proxy, caddy.CONFIG_DIR)
    routes = caddy.flatten(caddy.parse_parts(tree))
    body, _ = drift.body_of(proxy.labels)
    identity, tokens, pool = admin.identity(proxy.id), caddy.tokens_of(tree), caddy.pool_of(tree)
    old = caddy.dumps(caddy.compose(routes, body or {}, identity, tokens, pool, split=False))
    assert old != tree[caddy.CONFIG_FILE][0] and b"shipway_id" not in old
    files = {caddy.CONFIG_FILE: (old, 0o644), caddy.LOADED_FILE: (caddy.loaded(old), 0o644)}
    proxy.put_archive(caddy.CONFIG_DIR, tar_of(files))
    path = admin.host_socket(proxy, caddy.CONFIG_DIR)
    assert path is not None
    conn = _connection(deployment, env.a)
    try:
        admin.load(conn, path, str(proxy.id), old)
    finally:
        conn.close()
    assert _route_drift(deployment, app) == []  # taken as up to date
    outcome = deployment.deploy(Lines(), image=env.images.v2)
    assert isinstance(outcome, Rolled), outcome.line()
    now = read_tree(proxy, caddy.CONFIG_DIR)
    assert b"shipway_id" in now[caddy.CONFIG_FILE][0]  # the split's config, loaded
    assert now[caddy.LOADED_FILE][0] == caddy.loaded(now[caddy.CONFIG_FILE][0])
    eventually(lambda: deployment.get(env.a) == (200, "v2\n"), what="the reloaded proxy")
