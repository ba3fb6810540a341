"""One proxy per host and port, shared by every app and slot serving there: each adds and
removes only its own routes; one app's redeploy, stop or destroy never touches another's
routes nor fails its requests; an unknown host gets 404, a route whose release is down a
502 that says so; a per-slot proxy of before is moved over by a step the plan shows."""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import docker.types
import pytest

from shipway import api
from shipway.backends.docker import admin, caddy, proxy, render
from shipway.backends.docker.records import read_tree, tar_of
from shipway.engine import Rolled
from shipway.plan.model import ApplyObject, NoOp
from shipway.release.artifact import digest_of
from tests.backends.docker.conftest import (
    SLOT,
    Deployment,
    Lines,
    free_port,
    left_half_removed,
    removed,
    servers_started,
)
from tests.backends.local.conftest import eventually
from tests.loops import RequestLoop
from tests.testenv.docker import DockerEnv, DockerHost

ROUTE = '[[routes]]\nhost = "{host}"\nprocess = "web"\n'
#: the most requests one loop sends (it ends sooner when told to)
BOUND = 5000


def get(d: Deployment, host: DockerHost, name: str, path: str = "/version") -> tuple[int, str]:
    conn = http.client.HTTPConnection(host.address, d.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Host": name})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


@pytest.fixture
def other(deployment: Deployment, docker_env: DockerEnv, tmp_path: Path) -> Iterator[Deployment]:
    """Another app on the same Docker hosts and the same proxy port, whose network's name
    (``shipway-o…``) sorts before ``shipway-proxy``: as an app ``blog``'s does."""
    directory = tmp_path / "other"
    directory.mkdir()
    d = Deployment(
        env=docker_env, name=f"o{uuid.uuid4().hex[:8]}", dir=directory, port=deployment.port
    )
    try:
        yield d
    finally:
        d.cleanup()


def both_deployed(deployment: Deployment, other: Deployment) -> tuple[str, str]:
    """Both apps deployed on host A, on one proxy port, each routed by a name of its own:
    (the first's, the other's)."""
    env = deployment.env
    shop, blog = f"shop-{deployment.name}.test", f"blog-{other.name}.test"
    deployment.write(hosts=[env.a], extra=ROUTE.format(host=shop))
    other.write(hosts=[env.a], extra=ROUTE.format(host=blog))
    assert isinstance(deployment.deploy(), Rolled)
    assert isinstance(other.deploy(), Rolled)
    return shop, blog


#: what the moving app answers while its route switches: either release
SWITCHING = {(200, "v1\n"), (200, "v2\n")}


def answers(d: Deployment, host: DockerHost, name: str) -> tuple[int, str] | None:
    """:func:`get`, or None while nothing listens on the port yet."""
    try:
        return get(d, host, name)
    except OSError:
        return None


def test_two_apps_share_the_proxy_and_never_fail_each_other(
    deployment: Deployment, other: Deployment
) -> None:
    env = deployment.env
    shop, blog = f"shop-{deployment.name}.test", f"blog-{other.name}.test"
    deployment.write(hosts=[env.a], extra=ROUTE.format(host=shop))
    other.write(hosts=[env.a], extra=ROUTE.format(host=blog))
    assert isinstance(deployment.deploy(), Rolled)
    (proxy,) = deployment.containers(env.a, kind="proxy")
    # the other app's first deploy adds its route beside shop's: its name takes a pool
    # entry (files written), Caddy's config is not reloaded, and no request of shop's fails
    started = servers_started(proxy)
    # (its network sorts before the proxy's first: the engine keeps publishing the proxy's
    # port through the network that sorts before both, labels.GATEWAY_NETWORK)
    with RequestLoop(lambda _: get(deployment, env.a, shop), limit=BOUND) as loop:
        assert isinstance(other.deploy(), Rolled)
    assert servers_started(proxy) == started
    failed = [a.body if a.status == 0 else str(a) for a in loop.failed("v1\n")]
    assert len(loop.answers) > 10 and failed == [], loop.answers[-5:]
    # one proxy on the host's port, both apps served on it by name
    assert proxy.name == f"shipway-proxy-{deployment.port}"
    # its log (a line per canary request, for every app here) rotated on its own: the
    # test engines' daemons keep two files, the proxy three
    log = deployment.local(env.a).api.inspect_container(proxy.id)["HostConfig"]["LogConfig"]
    assert log == {"Type": "json-file", "Config": {"max-file": "3", "max-size": "10m"}}, log
    assert get(deployment, env.a, shop) == (200, "v1\n")
    assert get(other, env.a, blog) == (200, "v1\n")
    # a name no app serves: 404 and one line that says so
    assert get(deployment, env.a, "nobody.test") == (
        404,
        "404: no app serves nobody.test on this host\n",
    )

    # redeploying either fails none of the other's requests, nor its own: the switch
    # rewrites the route's upstream file, and Caddy's config is not reloaded
    for moving, moving_name, still, still_name, serves in (
        (deployment, shop, other, blog, "v1\n"),
        (other, blog, deployment, shop, "v2\n"),
    ):
        fetch = functools.partial(lambda _, d, name: get(d, env.a, name), d=still, name=still_name)
        own = functools.partial(lambda _, d, name: get(d, env.a, name), d=moving, name=moving_name)
        started = servers_started(proxy)
        with RequestLoop(fetch, limit=BOUND) as loop, RequestLoop(own, limit=BOUND) as mine:
            assert isinstance(moving.deploy(image=env.images.v2), Rolled)
        assert servers_started(proxy) == started  # no reload
        failed = [a.body if a.status == 0 else str(a) for a in loop.failed(serves)]
        assert len(loop.answers) > 10 and failed == [], loop.answers[-5:]
        own_failed = [str(a) for a in mine.answers if (a.status, a.body) not in SWITCHING]
        assert len(mine.answers) > 10 and own_failed == [], mine.answers[-5:]
        assert get(moving, env.a, moving_name) == (200, "v2\n")

    # the proxy was never replaced: each deploy changed only its own routes
    (same,) = deployment.containers(env.a, kind="proxy")
    assert same.id == proxy.id
    parts = caddy.parse_parts(read_tree(same, caddy.CONFIG_DIR))
    assert sorted(parts) == sorted([f"{deployment.name}/{SLOT}", f"{other.name}/{SLOT}"])

    # stopping one leaves the other's routes and answers; its own name is no app's now: its
    # pool entry is freed (files written), and Caddy's config is not reloaded
    started = servers_started(proxy)
    # (at least 11 requests: a quick stop or destroy is followed by the rest)
    with RequestLoop(lambda _: get(other, env.a, blog), limit=BOUND, least=11) as loop:
        api.stop(deployment.app(), SLOT, reporter=Lines())
    failed = [a.body if a.status == 0 else str(a) for a in loop.failed("v2\n")]
    assert len(loop.answers) > 10 and failed == [], loop.answers[-5:]
    assert servers_started(proxy) == started
    assert get(deployment, env.a, shop) == (404, f"404: no app serves {shop} on this host\n")
    assert [c.id for c in deployment.containers(env.a, kind="proxy")] == [proxy.id]

    # destroying the last slot that uses the proxy removes it
    with RequestLoop(lambda _: get(other, env.a, blog), limit=BOUND, least=11) as loop:
        api.destroy(deployment.app(), SLOT, confirm=SLOT, reporter=Lines())
    assert servers_started(proxy) == started
    assert len(loop.answers) > 10 and loop.failed("v2\n") == [], loop.answers[-5:]
    assert get(other, env.a, blog) == (200, "v2\n")
    api.destroy(other.app(), SLOT, confirm=SLOT, reporter=Lines())
    assert deployment.containers(env.a, kind="proxy") == []


def test_a_slot_without_routes_comes_switches_and_goes_with_no_reload(
    deployment: Deployment, other: Deployment
) -> None:
    """A slot that declares no routes answers every name no other route takes: the
    catch-all entry, whose files its first deploy, its switch and its stop write. Caddy's
    config is loaded by none of them, and the app beside it fails no request."""
    env = deployment.env
    blog = f"blog-{other.name}.test"
    other.write(hosts=[env.a], extra=ROUTE.format(host=blog))
    assert isinstance(other.deploy(), Rolled)
    (proxy,) = other.containers(env.a, kind="proxy")
    deployment.write(hosts=[env.a])  # no [[routes]]: every name
    assert get(deployment, env.a, "anything.test")[0] == 404
    started = servers_started(proxy)
    with RequestLoop(lambda _: get(other, env.a, blog), limit=BOUND) as loop:
        assert isinstance(deployment.deploy(), Rolled)
        assert get(deployment, env.a, "anything.test") == (200, "v1\n")
        assert isinstance(deployment.deploy(image=env.images.v2), Rolled)
        assert get(deployment, env.a, "anything.test") == (200, "v2\n")
        assert get(other, env.a, blog) == (200, "v1\n")  # its own name is still its own
        api.stop(deployment.app(), SLOT, reporter=Lines())
        assert get(deployment, env.a, "anything.test") == (
            404,
            "404: no app serves anything.test on this host\n",
        )
    assert servers_started(proxy) == started  # no config loaded
    failed = [a.body if a.status == 0 else str(a) for a in loop.failed("v1\n")]
    assert len(loop.answers) > 10 and failed == [], loop.answers[-5:]
    # deployed again: what a later run observes is what it wrote (its entry's files name
    # its containers): no drift to repair
    assert isinstance(deployment.deploy(), Rolled)
    assert get(deployment, env.a, "anything.test") == (200, "v1\n")
    assert [type(s) for s in api.plan(deployment.app(), SLOT, repair=True).steps] == [NoOp]


@pytest.fixture
def elsewhere(docker_env: DockerEnv, tmp_path: Path) -> Iterator[Deployment]:
    """Another app on the same Docker hosts, on a proxy port of its own."""
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    d = Deployment(env=docker_env, name=f"e{uuid.uuid4().hex[:8]}", dir=directory, port=free_port())
    try:
        yield d
    finally:
        d.cleanup()


def test_a_proxy_the_engine_left_half_removed_fails_no_other_app_and_is_made_anew(
    deployment: Deployment, elsewhere: Deployment
) -> None:
    """A container whose removal failed midway (another call read its files at that
    moment) stays listed as "removing", and every read of its files answers 500. Each
    deploy, destroy and status on a host reads every proxy there (who serves a host name),
    so such a proxy of another port must fail none of them; the next deploy of a slot it
    served makes it anew, that slot's routes kept (they are in its volume)."""
    env = deployment.env
    shop, blog = f"shop-{deployment.name}.test", f"blog-{elsewhere.name}.test"
    deployment.write(hosts=[env.a], extra=ROUTE.format(host=shop))
    elsewhere.write(hosts=[env.a], extra=ROUTE.format(host=blog))
    assert isinstance(elsewhere.deploy(), Rolled)
    (proxy,) = elsewhere.containers(env.a, kind="proxy")
    client = elsewhere.local(env.a)
    try:
        with left_half_removed(proxy):
            (row,) = client.api.containers(all=True, filters={"id": proxy.id})
            assert row["State"] == "removing"
            with pytest.raises(docker.errors.APIError, match="inconsistent paths"):
                client.api.get_archive(proxy.id, caddy.CONFIG_DIR)  # any read of its files
            assert isinstance(deployment.deploy(), Rolled)
            assert get(deployment, env.a, shop) == (200, "v1\n")
            assert {x.kind for x in api.leftovers(deployment.app(), SLOT)} >= {"proxy"}
            assert api.status(elsewhere.app(), SLOT) is not None
    finally:
        client.close()
    # the engine could remove it now: the next deploy of the slot it served does, and
    # makes the proxy anew with that slot's route
    assert isinstance(elsewhere.deploy(), Rolled)
    (made,) = elsewhere.containers(env.a, kind="proxy")
    assert made.id != proxy.id and made.status == "running"
    assert get(elsewhere, env.a, blog) == (200, "v1\n")


def test_a_stop_takes_its_routes_out_of_a_proxy_on_a_port_its_spec_no_longer_names(
    deployment: Deployment, other: Deployment
) -> None:
    """A stop looks at every shared proxy on its hosts: another port's one through its
    slots.json alone (no lock, no inspection), and one that holds this slot's part is
    changed under its lock as before — only this slot's routes leave it."""
    env = deployment.env
    shop, blog = both_deployed(deployment, other)
    assert get(deployment, env.a, shop) == (200, "v1\n")
    earlier = deployment.port
    deployment.port = free_port()  # the spec names another port: that proxy is not its own
    try:
        deployment.write(hosts=[env.a], extra=ROUTE.format(host=shop))
        lines = Lines()
        api.stop(deployment.app(), SLOT, reporter=lines)
    finally:
        deployment.port = earlier  # the fixture's clean-up removes the proxy of this port
    assert f"dropped its 1 routes from shared proxy shipway-proxy-{earlier}" in lines.text()
    assert get(deployment, env.a, shop) == (404, f"404: no app serves {shop} on this host\n")
    assert get(other, env.a, blog) == (200, "v1\n")
    (proxy,) = deployment.containers(env.a, kind="proxy")
    assert sorted(caddy.parse_parts(read_tree(proxy, caddy.CONFIG_DIR))) == [f"{other.name}/{SLOT}"]


def test_a_route_whose_release_is_down_answers_502_with_a_body_that_says_so(
    deployment: Deployment,
) -> None:
    env = deployment.env
    name = f"down-{deployment.name}.test"
    deployment.write(hosts=[env.a], extra=ROUTE.format(host=name))
    assert isinstance(deployment.deploy(), Rolled)
    (web,) = deployment.containers(env.a, kind="app")
    web.stop(timeout=1)
    status, body = get(deployment, env.a, name)
    assert status in (502, 503)
    down = "is down (none of its containers answered)"
    assert body == f"{status}: the release serving {name} on this host {down}\n"


def _per_slot_proxy(d: Deployment, host: DockerHost) -> str:
    """Put the slot's routes back in a per-slot proxy as shipway made before the shared one
    (its name, labels, volume, files and config), the shared proxy gone."""
    client = d.local(host)
    try:
        (shared,) = d.containers(host, kind="proxy")
        part = caddy.parse_parts(read_tree(shared, caddy.CONFIG_DIR))[f"{d.name}/{SLOT}"]
        # as before upstream files: each route names its containers in the config
        part = {k: {n: v for n, v in f.items() if n != "group"} for k, f in part.items()}
        removed(client, str(shared.id))  # other tests read it meanwhile
        client.volumes.get(shared.name).remove(force=True)
        name = volume = f"shipway-{d.name}-{SLOT}-proxy"
        body = {
            "kind": "proxy",
            "name": name,
            "image": d.env.images.proxy,
            "port": d.port,
            "listen": 80,
            "network": f"shipway-{d.name}-{SLOT}",
            "volume": volume,
            "config_dir": caddy.CONFIG_DIR,
            "drain": 1.0,
            "upstream_try": render.UPSTREAM_TRY,
            "restart": "unless-stopped",
            "stop_timeout": 10,
        }
        tags = {"org.shipway.app": d.name, "org.shipway.slot": SLOT, "org.shipway.kind": "proxy"}
        client.volumes.create(volume, labels=tags)
        proxy = client.containers.create(
            d.env.images.proxy,
            ["caddy", "run", "--config", f"{caddy.CONFIG_DIR}/{caddy.CONFIG_FILE}"],
            name=name,
            labels={
                **tags,
                "org.shipway.key": "proxy@docker-a" if host is d.env.a else f"proxy@{host.address}",
                "org.shipway.digest": digest_of(body),
                "org.shipway.unit": caddy.dumps(body).decode().strip(),
            },
            mounts=[docker.types.Mount(caddy.CONFIG_DIR, volume, type="volume")],
            ports={"80/tcp": d.port},
            network=str(body["network"]),
            restart_policy={"Name": "unless-stopped"},
        )
        config = caddy.compose(part, body, admin.identity(str(proxy.id)))
        files = {
            caddy.ROUTES_FILE: (caddy.dumps(part), 0o644),
            caddy.CONFIG_FILE: (caddy.dumps(config), 0o644),
        }
        proxy.put_archive(caddy.CONFIG_DIR, tar_of(files))
        proxy.start()
        return name
    finally:
        client.close()


def test_a_host_with_a_per_slot_proxy_is_moved_over_by_a_step_the_plan_shows(
    deployment: Deployment,
) -> None:
    env = deployment.env
    name = f"move-{deployment.name}.test"
    deployment.write(hosts=[env.a], extra=ROUTE.format(host=name))
    assert isinstance(deployment.deploy(), Rolled)
    old = _per_slot_proxy(deployment, env.a)
    eventually(lambda: answers(deployment, env.a, name) == (200, "v1\n"), what="served by it")

    app = deployment.app()
    the_plan = api.plan(app, SLOT, image=env.images.v2)
    lines = [s.describe() for s in the_plan.steps] + api.object_diff(app, SLOT, the_plan)
    text = "\n".join(lines)
    assert "update proxy@docker-a" in text, text
    shared = f"shipway-proxy-{deployment.port}"
    assert f"move proxy: per-slot proxy {old} → shared proxy {shared}" in text, text

    out = Lines()
    assert isinstance(deployment.deploy(out, image=env.images.v2), Rolled)
    assert "update proxy@docker-a" in out.text()
    assert get(deployment, env.a, name) == (200, "v2\n")
    (proxy,) = deployment.containers(env.a, kind="proxy")
    assert proxy.name == shared  # the per-slot one and its volume are gone
    client = deployment.local(env.a)
    try:
        with pytest.raises(docker.errors.NotFound):
            client.volumes.get(old)
    finally:
        client.close()
    assert api.plan(deployment.app(), SLOT, image=env.images.v2).unchanged


@pytest.mark.parametrize("named", [True, False], ids=["host-name", "catch-all"])
def test_an_upstream_file_naming_another_release_is_drift_and_repaired(
    deployment: Deployment, named: bool
) -> None:
    """What a route serves is its pool entry's upstream file: one that names other
    containers than the route's entry (a run killed between the two writes, or a hand edit)
    is seen by observe and put back by a repair, without a reload. The same for the
    catch-all entry of a slot that declares no routes."""
    env = deployment.env
    name = f"file-{deployment.name}.test"
    deployment.write(hosts=[env.a], extra=ROUTE.format(host=name) if named else "")
    assert isinstance(deployment.deploy(), Rolled)
    (proxy,) = deployment.containers(env.a, kind="proxy")
    tree = read_tree(proxy, caddy.CONFIG_DIR)
    owner = f"{deployment.name}/{SLOT}"
    (key,) = caddy.parse_parts(tree)[owner]
    entry = caddy.parse_parts(tree)[owner][key]
    # the route's one host name took a pool entry (every name: the catch-all entry): its
    # files name the host, the alias its one container was given and the port, and Caddy
    # serves it
    pool = caddy.pool_of(tree)
    if named:
        ((index, taken),) = pool.entries.items()
        assert taken == (f"{owner} {key}", name)
        at = f"pool-{index}"
    else:
        assert pool.entries == {}
        at = caddy.CATCH_ALL_ENTRY
    upstream = f"{at}.up"
    assert tree[f"{at}.host"][0] == f"{name if named else caddy.ANY}".encode()
    port = str(entry["body"]["upstreams"][0]).rsplit(":", 1)[1]
    assert tree[f"{at}.port"][0] == f"{port}".encode()
    (web,) = deployment.containers(env.a, kind="app")
    assert tree[upstream][0] == f"{entry['group']}".encode()
    assert web.labels["org.shipway.alias"] == entry["group"]
    assert get(deployment, env.a, name) == (200, "v1\n")

    proxy.put_archive(caddy.CONFIG_DIR, tar_of({upstream: (b"shipway-up-nobody\n", 0o644)}))
    eventually(lambda: get(deployment, env.a, name)[0] in (502, 503), what="served by nobody")
    plan = api.plan(deployment.app(), SLOT, repair=True)
    assert key in {s.unit for s in plan.steps if isinstance(s, ApplyObject)}, plan.steps
    detail = "\n".join(api.object_diff(deployment.app(), SLOT, plan))
    assert "its pool entries name other containers than its entry" in detail, detail
    started = servers_started(proxy)
    api.repair(deployment.app(), SLOT, reporter=Lines(), timeout=120)
    assert get(deployment, env.a, name) == (200, "v1\n")
    assert servers_started(proxy) == started  # the file alone was written again
    assert [type(s) for s in api.plan(deployment.app(), SLOT, repair=True).steps] == [NoOp]


def test_a_proxy_image_with_a_caddy_older_than_2_8_is_refused_naming_the_fix(
    deployment: Deployment,
) -> None:
    """An image that says it holds Caddy 2.6 (as the official image says its version, in
    ``CADDY_VERSION``) is refused before a proxy is made from it: the deploy fails with the
    version found and the fix, and no proxy runs on the port."""
    env = deployment.env
    old = f"{env.images.proxy.rsplit(':', 1)[0]}:old-{deployment.name}"
    client = deployment.local(env.a)
    try:
        client.images.pull(env.images.proxy)  # a new machine's host may not hold it yet
        dockerfile = f"FROM {env.images.proxy}\nENV CADDY_VERSION=v2.6.2\n".encode()
        client.images.build(fileobj=io.BytesIO(dockerfile), tag=old, rm=True)
        deployment.write(hosts=[env.a], extra=ROUTE.format(host=f"old-{deployment.name}.test"))
        deployment.spec_file.write_text(
            deployment.spec_file.read_text().replace(env.images.proxy, old)
        )
        outcome = deployment.deploy()
        assert not outcome.ok
        said = str(outcome.failure)
        assert f"the proxy image {old} holds Caddy v2.6.2" in said, said
        assert 'proxy_image = "caddy:2"' in said, said
        assert deployment.containers(env.a, kind="proxy") == []
    finally:
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(old, force=True)
        client.close()


def test_a_proxy_made_while_a_slot_it_joined_loses_its_network_still_starts(
    deployment: Deployment,
) -> None:
    """A proxy made anew joins every slot's network its routes name; one of those slots
    destroyed before it starts removes its network (the engine lets a network go while only
    created containers are on it), and the start failed with "network … not found". It
    leaves the networks that are gone and starts."""
    client = deployment.local(deployment.env.a)
    client.images.pull(deployment.env.images.proxy)  # a new machine's host may not hold it yet
    gone = f"shipway-{deployment.name}-gone"
    network = client.networks.create(gone, driver="bridge")
    made = client.containers.create(deployment.env.images.proxy, command=["caddy", "version"])
    try:
        client.api.connect_container_to_network(made.id, gone)
        network.remove()
        with pytest.raises(docker.errors.APIError, match="not found"):
            made.start()  # what the engine does without the mend
        proxy._start(client, made)
        made.reload()
        assert gone not in made.attrs["NetworkSettings"]["Networks"]
        assert made.attrs["State"]["StartedAt"] != "0001-01-01T00:00:00Z"
    finally:
        made.remove(force=True)
        client.close()
