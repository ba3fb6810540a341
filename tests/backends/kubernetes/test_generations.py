"""What a namespace's objects say about a blue-green slot's generations and hosts (pure), and
the objects of a generation and of a host as rendered. The same on the real control plane:
``test_blue_green.py``."""

from __future__ import annotations

from typing import Any

from shipway.backends.kubernetes import generations as gens
from shipway.backends.kubernetes import render
from shipway.release.model import Release, ReleaseStatus
from tests.backends.kubernetes.test_render import CASES, load_case

G1, G2 = "prod-20250101-000000", "prod-20250102-000000"
G0 = "prod-20250102-030405"  # render/generation.toml's
SHOP = {
    render.NAME: "shop",
    render.INSTANCE: "shop-prod",
    render.MANAGED_BY: "shipway",
}


def obj(name: str, created: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": "shop", "creationTimestamp": created, "labels": labels}
    return {"metadata": meta, "spec": spec}


def deployment(generation: str, process: str, replicas: int, created: str) -> dict[str, Any]:
    labels = {**SHOP, render.GENERATION: generation}
    return obj(f"shop-{process}-{generation}", created, labels, replicas=replicas)


def ingress(
    name: str, hosts: list[str], labels: dict[str, str], namespace: str = "shop"
) -> dict[str, Any]:
    backend = {"service": {"name": f"svc-{name}", "port": {"number": 80}}}
    rules = [{"host": h, "http": {"paths": [{"path": "/", "backend": backend}]}} for h in hosts]
    body = obj(name, "", labels, rules=rules, tls=[{"hosts": hosts, "secretName": "tls"}])
    body["metadata"]["namespace"] = namespace
    return body


def record(revision: int, generation: str, status: str) -> Release:
    return Release(
        app="shop",
        slot="prod",
        revision=revision,
        status=ReleaseStatus(status),
        generation=generation,
    )


def test_generations_are_found_oldest_first_with_their_state_and_release() -> None:
    secrets = [
        obj(f"shop-env-{G1}", "2025-01-01T00:00:00Z", {**SHOP, render.GENERATION: G1}),
        obj(f"shop-env-{G2}", "2025-01-02T00:00:00Z", {**SHOP, render.GENERATION: G2}),
        # applied, then interrupted before its Deployments: still a generation (gc finds it)
        obj("shop-env-prod-x", "2025-01-03T00:00:00Z", {**SHOP, render.GENERATION: "prod-x"}),
    ]
    deployments = [
        deployment(G1, "web", 0, "2025-01-01T00:00:01Z"),
        deployment(G2, "web", 2, "2025-01-02T00:00:01Z"),
    ]
    host = ingress("shop-shop-example-com", ["shop.example.com"], {**SHOP, gens.ROUTES_TO: G2})
    records = [record(1, G1, "superseded"), record(2, G2, "deployed"), record(3, G1, "failed")]
    found = gens.generation_infos(secrets, deployments, [host], records)
    assert [(g.name, g.state, g.release, g.created_at) for g in found] == [
        (G1, "asleep", 3, "2025-01-01T00:00:00Z"),
        (G2, "live", 2, "2025-01-02T00:00:00Z"),
        ("prod-x", "asleep", None, "2025-01-03T00:00:00Z"),
    ]


def test_generations_made_in_one_second_keep_the_order_they_were_made_in() -> None:
    """The API server's timestamps have a one-second grain; the names tell the order."""
    made = [G1, f"{G1}-2", f"{G1}-3", f"{G1}-10"]
    secrets = [
        obj(f"shop-env-{g}", "2025-01-01T00:00:00Z", {**SHOP, render.GENERATION: g})
        for g in reversed(made)
    ]
    found = gens.generation_infos(secrets, [], [], [])
    assert [g.name for g in found] == made


def test_live_is_what_the_hosts_route_to_else_the_deployed_generation_while_it_runs() -> None:
    records = [record(1, G1, "superseded"), record(2, G2, "deployed")]
    assert gens.live_generation([G1], records, awake=[G1, G2]) == G1
    # hosts split between generations (an interrupted switch): the deployed one's
    assert gens.live_generation([G1, G2], records, awake=[]) == G2
    # an app without hosts: the deployed release's generation, while it runs
    assert gens.live_generation([], records, awake=[G2]) == G2
    assert gens.live_generation([], records, awake=[G1]) is None


def test_an_ingress_names_its_owner() -> None:
    other = {
        render.NAME: "blog",
        render.INSTANCE: "blog-test1",
        render.MANAGED_BY: "shipway",
    }
    owner = gens.owner_of(ingress("blog-x", ["x"], other, namespace="blog"))
    assert str(owner) == "blog/test1 (Ingress blog/blog-x)"
    mine = gens.owner_of(ingress("shop-x", ["x"], {**SHOP, gens.ROUTES_TO: G1}))
    assert (mine.app, mine.slot, mine.generation) == ("shop", "prod", G1)
    # this app and slot's names, deployed in another namespace: not this slot
    elsewhere = gens.owner_of(ingress("shop-x", ["x"], SHOP, "old"), ("shop", "prod", "shop"))
    assert str(elsewhere) == "shop/prod (namespace old) (Ingress old/shop-x)"
    here = gens.owner_of(ingress("shop-x", ["x"], SHOP), ("shop", "prod", "shop"))
    assert (here.app, here.slot) == ("shop", "prod")
    foreign = gens.owner_of(ingress("legacy", ["x"], {}, namespace="web"))
    assert str(foreign) == "unmanaged/web (Ingress web/legacy, not made by shipway)"
    assert gens.is_ours(ingress("shop-x", ["x"], SHOP), "shop", "shop-prod", "shop")
    assert not gens.is_ours(
        ingress("shop-x", ["x"], SHOP, "elsewhere"), "shop", "shop-prod", "shop"
    )


def test_taking_a_host_keeps_the_other_rules_and_tls_hosts() -> None:
    both = ingress("legacy", ["a.example.com", "Shop.Example.com"], {})
    assert gens.serves(both, "shop.example.com")
    rules, tls = gens.without_host(both, "shop.example.com")
    assert [r["host"] for r in rules] == ["a.example.com"]
    assert tls == [{"hosts": ["a.example.com"], "secretName": "tls"}]
    assert gens.without_host(ingress("only", ["shop.example.com"], {}), "shop.example.com") == (
        [],
        [],
    )
    assert gens.backends_of(both) == {"svc-legacy"}


def test_a_generation_is_a_labelled_copy_without_replicas_or_ingress() -> None:
    app, slot, release = load_case(CASES / "generation.toml")
    units = list(render.render(app, slot, release))
    assert not [u for u in units if u.kind == "Ingress"]
    for unit in units:
        if unit.kind == "Namespace":
            assert unit.generation is None
            continue
        assert unit.generation == G0
        assert unit.body["metadata"]["labels"][render.GENERATION] == G0
        assert unit.key.endswith(G0)
    web = next(u for u in units if u.key == f"Deployment/shop-web-{G0}")
    assert "replicas" not in web.body["spec"]
    assert render.declared_replicas(web.body) == 4  # the slot's override
    assert web.body["spec"]["selector"]["matchLabels"][render.GENERATION] == G0
    container = web.body["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": f"shop-env-{G0}"}}]
    service = next(u for u in units if u.kind == "Service")
    assert service.body["spec"]["selector"][render.GENERATION] == G0


def test_a_host_ingress_is_the_slot_s_and_routes_to_a_generation() -> None:
    app, slot, _ = load_case(CASES / "generation.toml")
    route = app.routes[1]  # admin.shop.example.com -> web:9000
    body = render.host_ingress(app, slot.name, "shop", route, G0)
    assert body["metadata"]["name"] == render.ingress_name("shop", route.host)  # as when rolling
    labels = body["metadata"]["labels"]
    assert labels[render.ROUTES_TO] == G0 and render.GENERATION not in labels
    path = body["spec"]["rules"][0]["http"]["paths"][0]
    assert path["backend"]["service"] == {"name": f"shop-web-{G0}", "port": {"number": 9000}}
    tls = render.host_ingress(app, slot.name, "shop", app.routes[0], G0)["spec"]["tls"]
    assert tls == [{"hosts": ["shop.example.com"], "secretName": "shop-tls"}]
