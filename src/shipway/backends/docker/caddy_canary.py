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

A route in a shared proxy's pool (or secure entries) splits without a reload: its canary
is three more files of each of its entries (:func:`entry_files`), read at each request
(:func:`entry_handle`): ``.canary`` the canary release's alias, ``.cut`` the split's
threshold, ``.id`` the canary's id (empty: no canary, the entry proxies to ``.up`` as
before). While a canary runs, a request goes to the canary when the tester's header says
``always``; else, unless it says ``never``, when its ``shipway-canary`` cookie says this
canary's ``<id>.canary``, or, without a cookie of this canary, when its random id
(``{http.request.uuid}``, version 4) is below the cut: ``percent`` % of new clients. Each
side adds the cookie (``<id>.canary`` or ``<id>.stable``, as on Kubernetes), so a client
keeps its release on every host, and logs its requests with the side that took them
(:data:`FIELD_SIDE`). A canary splits the entries only when it can (:func:`in_entries`:
one alias, the route's port, the default answer timeout, which is in the config); else
its route's split is in the config (:func:`split_route`), a reload at each share.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shipway.backends.docker.entries import line, port_of
from shipway.spec.canary import ANSWER_TIMEOUT

COOKIE = "shipway-canary"
HEADER = "X-Shipway-Canary"
LOGGER = "shipway-canary"
#: the fields appended to the canary's access-log lines
FIELD_ID, FIELD_UPSTREAM, FIELD_STATUS = "shipway_canary", "shipway_upstream", "shipway_status"
#: the field that says which side took a request of a pooled route's canary
FIELD_SIDE = "shipway_side"
SIDES = ("stable", "canary")
#: what the split's random id is compared with: 4 hex digits, 65,536 steps
CUT_STEPS = 16**4
#: how long a side of an entry's split tries its release's containers (within that release
#: alone): an entry file written through the Engine API may be missing for an instant, and
#: a request that reads it then finds no container; it is tried again 100 ms later
SIDE_TRY = 1.0


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


def in_entries(unit: Mapping[str, Any]) -> bool:
    """Whether a route unit's canary, if it has one, can split its entries (files only):
    its release has one alias, listens on the route's port, and its answer timeout is the
    one in the entries' config."""
    canary = unit.get("canary")
    if not canary:
        return True
    timeout = float(canary.get("answer_timeout") or ANSWER_TIMEOUT)
    ports = {str(u).rsplit(":", 1)[-1] for u in canary.get("upstreams") or []}
    port = port_of(unit.get("body") or {"upstreams": [""]})
    return bool(canary.get("group")) and timeout == ANSWER_TIMEOUT and ports == {port}


def cut(percent: int) -> str:
    """The threshold a request's random id is compared with (as strings) for ``percent``
    % of new clients on the canary: ``g`` is above every hex digit."""
    if percent >= 100:
        return "g"
    return f"{round(max(percent, 0) * CUT_STEPS / 100):04x}"


def entry_files(
    at: str, canary: Mapping[str, Any] | None
) -> tuple[dict[str, tuple[bytes, int]], dict[str, tuple[bytes, int]]]:
    """An entry's canary files (``at``: what they are named from): those written first,
    and its ``.id``, written after them when a canary starts. When it ends, only its
    ``.id`` is emptied: a request that read the id a moment before still finds the alias.
    A canary without an alias (one that cannot split entries) is none here."""
    if not canary or not canary.get("group"):
        return {}, {f"{at}.id": line("")}
    group, percent = str(canary["group"]), int(canary.get("weight", 0))
    split = {f"{at}.canary": line(group), f"{at}.cut": line(cut(percent))}
    return split, {f"{at}.id": line(str(canary.get("id", "")))}


#: while a canary runs, whether a request of an entry goes to it (Caddy's CEL matcher)
_ID = "{http.vars.shipway_id}"
_SAYS = "{http.request.header.X-Shipway-Canary}"
_KEPT = "{http.request.cookie.shipway-canary}"
TO_CANARY = (
    f'{_SAYS} == "always" || ({_SAYS} != "never" && ({_KEPT} == {_ID} + ".canary" || '
    f'({_KEPT} != {_ID} + ".stable" && {{http.request.uuid}} < {{http.vars.shipway_cut}})))'
)


def entry_handle(
    at: str, proxied: Callable[[str, float | None], dict[str, Any]]
) -> list[dict[str, Any]]:
    """The handlers of a pooled entry (``at``: the path its files are named from):
    without a canary (``.id`` empty), ``proxied(".up", None)`` as before; with one, the
    canary side or the stable side, each logged and sticky. ``proxied(file, timeout)``: a
    reverse proxy to the alias in ``at + file`` (an answer's head awaited ``timeout``
    seconds and its containers tried :data:`SIDE_TRY` seconds, when given)."""

    def side(name: str, file: str) -> list[dict[str, Any]]:
        cookie = f"{COOKIE}={_ID}.{name}; Path=/; HttpOnly; SameSite=Lax"
        return [
            {"handler": "vars", "access_logger_names": [LOGGER]},
            {"handler": "log_append", "key": FIELD_ID, "value": _ID},
            {"handler": "log_append", "key": FIELD_SIDE, "value": name},
            {
                "handler": "log_append",
                "key": FIELD_STATUS,
                "value": "{http.reverse_proxy.status_code}",
            },
            # added: the app's own cookies stay
            {"handler": "headers", "response": {"add": {"Set-Cookie": [cookie]}}},
            proxied(file, ANSWER_TIMEOUT),
        ]

    split = [
        {
            "match": [{"expression": TO_CANARY}],
            "handle": side("canary", ".canary"),
            "terminal": True,
        },
        {"handle": side("stable", ".up")},
    ]
    routes = [
        {"match": [{"vars": {_ID: [""]}}], "handle": [proxied(".up", None)], "terminal": True},
        {
            "handle": [
                {"handler": "vars", "shipway_cut": f"{{file.{at}.cut}}"},  # read only then
                {"handler": "subroute", "routes": split},
            ]
        },
    ]
    return [
        {"handler": "vars", "shipway_id": f"{{file.{at}.id}}"},
        {"handler": "subroute", "routes": routes},
    ]


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
