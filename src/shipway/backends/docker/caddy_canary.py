"""A canary in a host's shared Caddy: the split of one route by weight, and the access log
the counts are read from. PURE (the config fragments only; :mod:`.canary` applies and reads).

A route unit in the proxy's ``slots.json`` may carry a canary beside its body::

    {"key", "digest", "body": {... "upstreams": [stable ...]},
     "canary": {"id": "app.slot.r5", "upstreams": [...], "weight": 10, "secret": "...",
                "since": 1733328000.0}}

The route's requests then go through a ``subroute`` (:func:`split_route`), in order:

1. ``X-Shipway-Canary: always`` → the canary's containers, ``never`` → the stable's (a
   tester's choice, matched by Caddy's ``header`` matcher);
2. else one ``reverse_proxy`` over both releases' containers with Caddy's ``cookie``
   selection policy (the ``shipway-canary`` cookie: an HMAC of the upstream chosen, so a
   client keeps its container, hence its release, while the canary runs) and, for a
   client without such a cookie, the ``weighted_round_robin`` fallback: weights that give
   the canary's containers ``weight`` % of those requests together. Dial failures are not
   retried on the other release (``try_duration`` 0): a canary that refuses connections
   answers the proxy's 502, counted as a failure, as the local router's own 502 is.
   An answer whose head has not come within the canary's ``answer_timeout`` (in the entry
   when set; 30 s) ends in the proxy's 504 (``response_header_timeout`` on the route's
   proxies while the canary runs, the stable's requests too): a canary that hangs fails
   its requests, and they count.

Every request of a canary's route is written to the access log ``shipway-canary`` (the
proxy's stdout, JSON, the request's headers left out), with three fields appended
(``log_append``): the canary's id, the upstream that took it (``host:port``), and the
status the upstream answered (none when no upstream answered: a failure). No other
request is logged: the default log leaves the access logs out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from shipway.spec.canary import ANSWER_TIMEOUT

COOKIE = "shipway-canary"
HEADER = "X-Shipway-Canary"
LOGGER = "shipway-canary"
#: the fields appended to the canary's access-log lines
FIELD_ID, FIELD_UPSTREAM, FIELD_STATUS = "shipway_canary", "shipway_upstream", "shipway_status"


def weights(stable: int, canary: int, percent: int) -> list[int]:
    """Per upstream (the stable's first, then the canary's), weights that give the
    canary's ``canary`` upstreams ``percent`` % of the requests together."""
    if canary == 0 or percent <= 0:
        return [1] * stable + [0] * canary
    if stable == 0 or percent >= 100:
        return [0] * stable + [1] * canary
    on_stable, on_canary = (100 - percent) * canary, percent * stable
    g = math.gcd(on_stable, on_canary)
    return [on_stable // g] * stable + [on_canary // g] * canary


def split_route(
    base: Mapping[str, Any], body: Mapping[str, Any], canary: Mapping[str, Any]
) -> dict[str, Any]:
    """The route ``base`` (one ``reverse_proxy`` to the body's upstreams) with the canary
    beside it: the tester's header, the sticky weighted split, the access log."""
    proxy = dict(base["handle"][0])
    # an answer whose head has not come within the canary's answer_timeout ends in the
    # proxy's 504, logged as a failure of the release that took it (a hanging canary is
    # counted); it applies to the stable's requests of the route too while the canary runs
    patience = float(canary.get("answer_timeout") or ANSWER_TIMEOUT)
    transport = dict(proxy.get("transport") or {"protocol": "http"})
    transport["response_header_timeout"] = int(patience * 1e9)
    proxy["transport"] = transport
    stable = [str(u) for u in body["upstreams"]]
    new = [str(u) for u in canary.get("upstreams") or []]

    def to(upstreams: Sequence[str]) -> dict[str, Any]:
        return {**proxy, "upstreams": [{"dial": u} for u in upstreams]}

    balancing = {k: v for k, v in proxy.get("load_balancing", {}).items() if k != "try_duration"}
    fallback = {
        "policy": "weighted_round_robin",
        "weights": weights(len(stable), len(new), int(canary.get("weight", 0))),
    }
    balancing["selection_policy"] = {
        "policy": "cookie",
        "name": COOKIE,
        "secret": str(canary.get("secret") or canary.get("id", "")),
        "fallback": fallback,
    }
    split = {**to([*stable, *new]), "load_balancing": balancing}
    routes = [
        {"match": [{"header": {HEADER: ["always"]}}], "handle": [to(new)], "terminal": True},
        {"match": [{"header": {HEADER: ["never"]}}], "handle": [to(stable)], "terminal": True},
        {"handle": [split]},
    ]
    handle = [
        {"handler": "vars", "access_logger_names": [LOGGER]},
        {"handler": "log_append", "key": FIELD_ID, "value": str(canary.get("id", ""))},
        {
            "handler": "log_append",
            "key": FIELD_UPSTREAM,
            "value": "{http.reverse_proxy.upstream.hostport}",
        },
        {"handler": "log_append", "key": FIELD_STATUS, "value": "{http.reverse_proxy.status_code}"},
        {"handler": "subroute", "routes": routes},
    ]
    return {**base, "handle": handle}


#: the ``logging`` of a config with a canary: its access log on stdout, nothing else's
LOGGING: dict[str, Any] = {
    "logs": {
        "default": {"exclude": ["http.log.access"]},
        LOGGER: {
            "writer": {"output": "stdout"},
            "encoder": {
                "format": "filter",
                "wrap": {"format": "json"},
                "fields": {
                    "request": {"filter": "delete"},
                    "resp_headers": {"filter": "delete"},
                    "user_id": {"filter": "delete"},
                },
            },
            "include": [f"http.log.access.{LOGGER}"],
        },
    }
}


def drift_of(entry: Mapping[str, Any]) -> list[str]:
    """Why a route entry of a proxy's files is not the route any release recorded: a
    canary beside it (the undo, or the next run's recovery, applies the route again)."""
    canary = entry.get("canary")
    if not canary:
        return []
    return [f"a canary ({canary.get('id')}) takes {canary.get('weight')}% of its requests"]
