"""A canary's objects on Kubernetes, and where its counts come from: the Gateway API's
``HTTPRoute`` that splits a host's requests by weight between the stable release's Service
and the canary's, and the Prometheus that holds the Gateway implementation's counts per
Service. Pure bodies and readings here, plus the one HTTP read of Prometheus; the backend
part that applies and waits is :mod:`.canary`.

The route's status is the implementation's word: a weight counts only once the route's
parent (the Gateway) says ``Accepted`` and ``ResolvedRefs`` for the route's generation.

Stickiness, from standard ``HTTPRoute`` fields only: a request holding this canary's
``shipway-canary`` cookie (``<canary id>.canary`` or ``.stable``: a ``Cookie`` header match
of type ``RegularExpression``) goes to that side; where the Gateway's implementation runs a
backendRef's filters (:func:`keeps_clients`, from its GatewayClass), the weighted rule's two
``backendRefs`` each carry a ``ResponseHeaderModifier`` filter adding the cookie of their
side, so a client's first answer tells it where it landed. A backendRef's filters are
"implementation-specific" in the Gateway API; one that does not run them (Traefik v3.6,
docs/canary.md) is given none, and splits each cookieless request by weight.

The counts: Traefik (the implementation the test environment runs, docs/canary.md) names
the Service of a route's backend ``<namespace>-<service>-http-<port>@kubernetesgateway`` in
its ``traefik_service_*`` metrics; its request-duration histogram is configured with the
buckets of :mod:`shipway.plan.canary`'s tally (1 ms, growing by 1.25x), so a Prometheus
bucket is one of the tally's buckets.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection, Mapping
from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.names import dns_name
from shipway.errors import BackendError
from shipway.plan.canary import Tally

GROUP = "gateway.networking.k8s.io"
HTTPRoute = create_namespaced_resource(GROUP, "v1", "HTTPRoute", "httproutes")
Gateway = create_namespaced_resource(GROUP, "v1", "Gateway", "gateways")
GatewayClass = create_global_resource(GROUP, "v1", "GatewayClass", "gatewayclasses")

#: on the route: the canary it splits for, its share, when the share was set
CANARY = "shipway.io/canary"
PERCENT = "shipway.io/canary-percent"
#: on the canary's objects (and its pods): the canary's id
CANARY_LABEL = "shipway.io/canary"
#: on a slot's HTTPRoutes and its canary notes: the slot's instance (not observing's label:
#: observing never lists them)
SLOT_LABEL = "shipway.io/slot"
NOTES_LABEL = "shipway.io/canary-notes"
ROUTE_LABEL = "shipway.io/route"
#: what the canary's Deployment and Service are named after the stable ones
SUFFIX = "-canary"
#: the header a tester sends: ``always`` (the canary) or ``never`` (the stable)
HEADER = "X-Shipway-Canary"
#: the cookie that keeps a client on its side (the local router's and Docker's name)
COOKIE = "shipway-canary"
#: what a GatewayClass declares when its implementation runs a backendRef's filters (the
#: Gateway API names the request-header variant only) and a ResponseHeaderModifier
BACKEND_FILTERS = "HTTPRouteBackendRequestHeaderModification"
RESPONSE_HEADERS = "HTTPRouteResponseHeaderModification"
#: the latency histogram (as the local router's: 1 ms, growing by 1.25x, 64 buckets)
BASE, GROWTH, BUCKETS = 0.001, 1.25, 64
#: how long a Prometheus query may take
QUERY_TIMEOUT = 5.0


def route_name(app: str, host: str) -> str:
    return dns_name(app, host, limit=253)


def canary_name(stable: str) -> str:
    """The canary's Deployment or Service beside the stable one of that name."""
    return dns_name(stable + SUFFIX)


def is_canary_object(name: str) -> bool:
    return name.endswith(SUFFIX)


def split_gateway(ref: str) -> tuple[str, str]:
    namespace, _, name = ref.partition("/")
    return namespace, name


def canary_workload(body: Mapping[str, Any], ident: str) -> dict[str, Any]:
    """A copy of the release's Deployment or Service, beside the stable one: its own name,
    and its pods told apart by their component (``web-canary``), so the stable Service
    never selects a canary pod and the canary's never a stable one. It carries the slot's
    labels: observing the slot sees it, so an undo or a recovery prunes it."""
    out: dict[str, Any] = json.loads(json.dumps(body))
    meta = out["metadata"]
    meta["name"] = canary_name(meta["name"])
    component = str(meta["labels"][render.COMPONENT]) + SUFFIX
    meta["labels"] = {**meta["labels"], render.COMPONENT: component, CANARY_LABEL: ident}
    if out["kind"] == "Deployment":
        out["spec"]["selector"]["matchLabels"][render.COMPONENT] = component
        pod = out["spec"]["template"]["metadata"]
        pod["labels"] = {**pod["labels"], render.COMPONENT: component, CANARY_LABEL: ident}
    else:
        out["spec"]["selector"][render.COMPONENT] = component
    return out


def route_body(
    app: str,
    slot: str,
    namespace: str,
    host: str,
    gateway: str,
    stable: str,
    port: int,
    canary: tuple[str, str, int] | None,
    *,
    set_cookies: bool = True,
) -> dict[str, Any]:
    """The host's HTTPRoute: every request to ``stable``, or (``canary``: its Service, its
    id, its share) that share to the canary's Service by weight; a tester's header picks a
    release, and a cookie of this canary keeps a client on its side. ``set_cookies``: the
    weighted split's backendRefs set the cookie of their side (only where the Gateway's
    implementation says it runs a backendRef's filters: another might refuse the route)."""
    gw_namespace, gw_name = split_gateway(gateway)
    parent = {"group": GROUP, "kind": "Gateway", "namespace": gw_namespace, "name": gw_name}
    to_stable = {"name": stable, "port": port}
    annotations: dict[str, str] = {}
    if canary is None:
        rules: list[dict[str, Any]] = [{"backendRefs": [{**to_stable, "weight": 100}]}]
    else:
        service, ident, percent = canary
        to_canary = {"name": service, "port": port}
        annotations = {CANARY: ident, PERCENT: str(percent)}

        def header(value: str) -> list[dict[str, Any]]:
            return [{"headers": [{"name": HEADER, "value": value}]}]

        def cookie(side: str) -> list[dict[str, Any]]:
            regex = cookie_match(ident, side)
            return [{"headers": [{"type": "RegularExpression", "name": "Cookie", "value": regex}]}]

        rules = [  # the tester's header first: it wins over a cookie (rule order breaks the tie)
            {"matches": header("always"), "backendRefs": [{**to_canary, "weight": 1}]},
            {"matches": header("never"), "backendRefs": [{**to_stable, "weight": 1}]},
            {"matches": cookie("canary"), "backendRefs": [{**to_canary, "weight": 1}]},
            {"matches": cookie("stable"), "backendRefs": [{**to_stable, "weight": 1}]},
            {"backendRefs": [{**to_stable, "weight": 100 - percent},
                             {**to_canary, "weight": percent}]},
        ]  # fmt: skip
        if set_cookies:
            for ref, side in zip(rules[-1]["backendRefs"], ("stable", "canary"), strict=True):
                ref["filters"] = set_cookie(ident, side)
    labels = {**render.selector_labels(app, slot), ROUTE_LABEL: "canary"}
    del labels[render.INSTANCE]  # not an object observing lists (no kind of the slot's)
    labels[SLOT_LABEL] = render.instance_of(app, slot)
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {
            "name": route_name(app, host),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"parentRefs": [parent], "hostnames": [host], "rules": rules},
    }


def cookie_value(ident: str, side: str) -> str:
    """The cookie's value for a client on ``side`` of the canary ``ident``: a cookie of an
    earlier canary matches no rule of this one (the client is split again)."""
    return f"{ident}.{side}"


def cookie_match(ident: str, side: str) -> str:
    """A regular expression (RE2 and Python alike) matching a whole ``Cookie`` header that
    holds the cookie of ``side``, among any others."""
    value = re.escape(cookie_value(ident, side))
    return rf"(^|.*;\s*){COOKIE}={value}(\s*;.*|\s*)$"


def set_cookie(ident: str, side: str) -> list[dict[str, Any]]:
    """A backendRef's filters: its answers set the cookie of its side."""
    cookie = f"{COOKIE}={cookie_value(ident, side)}; Path=/; HttpOnly; SameSite=Lax"
    header = {"name": "Set-Cookie", "value": cookie}
    return [{"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [header]}}]


def keeps_clients(gateway_class: Mapping[str, Any]) -> bool:
    """Whether the GatewayClass's implementation says it runs a backendRef's filters and a
    ResponseHeaderModifier (its ``status.supportedFeatures``): then a first answer sets the
    cookie of the side that served it."""
    declared = (gateway_class.get("status") or {}).get("supportedFeatures") or []
    names = {f.get("name") if isinstance(f, Mapping) else f for f in declared}
    return {BACKEND_FILTERS, RESPONSE_HEADERS} <= names


def route_state(route: Mapping[str, Any], gateway: str) -> tuple[bool, str]:
    """(the Gateway's implementation took the route as it is now, what it says)."""
    gw_namespace, gw_name = split_gateway(gateway)
    generation = (route.get("metadata") or {}).get("generation")
    for parent in (route.get("status") or {}).get("parents") or []:
        ref = parent.get("parentRef") or {}
        if ref.get("name") != gw_name or ref.get("namespace", gw_namespace) != gw_namespace:
            continue
        conditions = {c.get("type"): c for c in parent.get("conditions") or []}
        said = "; ".join(
            f"{t}={c.get('status')} ({c.get('reason')}"
            + (f": {c['message']})" if c.get("message") else ")")
            for t, c in conditions.items()
        )
        current = all(
            c.get("observedGeneration") in (None, generation) for c in conditions.values()
        )
        ok = all(
            (conditions.get(t) or {}).get("status") == "True" for t in ("Accepted", "ResolvedRefs")
        )
        return ok and current, said or "no conditions yet"
    return False, f"no status from the Gateway {gateway} yet (no implementation took the route)"


def gateway_accepted(gateway: Mapping[str, Any]) -> tuple[bool, str]:
    """(an implementation accepted the Gateway, what its status says)."""
    conditions = {c.get("type"): c for c in (gateway.get("status") or {}).get("conditions") or []}
    accepted = conditions.get("Accepted") or {}
    if accepted.get("status") == "True":
        return True, ""
    reason = accepted.get("reason") or "no status"
    message = accepted.get("message") or "no implementation has taken it"
    return False, f"Accepted is {accepted.get('status', 'unset')} ({reason}: {message})"


# -- Prometheus ------------------------------------------------------------------------


def traefik_service(namespace: str, service: str, port: int) -> str:
    """The name Traefik's metrics give a route's backend Service."""
    return f"{namespace}-{service}-http-{port}@kubernetesgateway"


def query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    """One instant query's result vector."""
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=QUERY_TIMEOUT) as answer:
            doc = json.loads(answer.read())
    except (OSError, ValueError) as exc:
        raise BackendError(f"querying Prometheus at {prometheus}: {exc}") from exc
    if doc.get("status") != "success":
        raise BackendError(f"Prometheus at {prometheus} refused {promql!r}: {doc.get('error')}")
    result = (doc.get("data") or {}).get("result") or []
    return list(result)


def reachable(prometheus: str) -> str | None:
    """None when Prometheus answers a query, else why not."""
    try:
        query(prometheus, "1")
    except BackendError as exc:
        return str(exc)
    return None


def tallies(prometheus: str, services: Mapping[str, Collection[str]]) -> dict[str, Tally]:
    """Each side's counts, summed over its Services (``services``: side -> Traefik's names
    of the Services of that side: one per routed process), read from Prometheus: requests
    and 5xx answers by status code, the duration histogram by bucket. A 502/503/504 Traefik
    answers itself (no server reached) is counted as a 5xx here."""
    by_name = {name: side for side, names in services.items() for name in names}
    # DNS names, a port and "@": nothing a regular expression reads specially
    selector = 'service=~"' + "|".join(sorted(by_name)) + '"'
    requests = dict.fromkeys(services, 0)
    errors = dict.fromkeys(services, 0)
    cumulative: dict[str, dict[str, int]] = {side: {} for side in services}
    counted = f"sum by (service, code) (traefik_service_requests_total{{{selector}}})"
    for sample in query(prometheus, counted):
        metric, value = sample["metric"], int(float(sample["value"][1]))
        side = by_name.get(str(metric.get("service")))
        if side is None:
            continue
        requests[side] += value
        if str(metric.get("code", "")).startswith("5"):
            errors[side] += value
    timed = f"sum by (service, le) (traefik_service_request_duration_seconds_bucket{{{selector}}})"
    for sample in query(prometheus, timed):
        metric = sample["metric"]
        side = by_name.get(str(metric.get("service")))
        if side is not None:
            le = str(metric.get("le"))
            cumulative[side][le] = cumulative[side].get(le, 0) + int(float(sample["value"][1]))
    return {
        side: Tally(requests[side], errors[side], 0, _histogram(cumulative[side]))
        for side in services
    }


def _histogram(cumulative: Mapping[str, int]) -> tuple[int, ...]:
    """Prometheus' cumulative buckets as the tally's: bucket 0 up to 1 ms, bucket i up to
    1 ms x 1.25^i, the last one everything above."""
    bounds = sorted((float(le), n) for le, n in cumulative.items() if le != "+Inf")
    total = cumulative.get("+Inf", bounds[-1][1] if bounds else 0)
    out = [0] * BUCKETS
    below = 0
    for i in range(BUCKETS - 1):
        limit = BASE * GROWTH**i
        upto = max((n for le, n in bounds if le <= limit * 1.0001), default=below)
        out[i] = max(0, upto - below)
        below = max(below, upto)
    out[BUCKETS - 1] = max(0, total - below)
    return tuple(out)
