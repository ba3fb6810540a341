"""``[slots.NAME.canary]``: how a canary release walks its steps, and the rules that abort
or promote it (docs/canary.md).

```toml
[slots.prod]
strategy = "canary"
[slots.prod.canary]
steps = [10, 50, 100]     # percent of requests to the new release, in order, ending at 100
step_time = "30s"         # at least this long at each share before it grows
step_requests = 100       # and at least this many requests to the canary at each share
error_rate = 0.01         # a bad-response rate the canary may have whatever the stable's
error_ratio = 5           # a canary this many times worse is what the test must catch
latency_ratio = 1.5       # a canary request slower than this x the stable's p99 is "slow"
false_abort = 0.01        # the test's false-abort rate over the whole canary
timeout = "30m"           # the longest one step may stay inconclusive (too little traffic)
at_timeout = "abort"      # then: "abort" (the stable keeps serving) or "promote"
answer_timeout = "30s"    # a request of the canary's route not answered within it is a
                          # failed request of its release (local and docker slots)
# on kubernetes only:
split = "gateway"         # or "replicas": the share in pods, no router (spec/canary_split.py)
# required with split = "gateway" on kubernetes:
gateway = "gateways/web"  # the Gateway (namespace/name) the canary's HTTPRoute attaches to
prometheus = "http://prometheus.monitoring:9090"  # where the gateway's metrics are queried
```

Every other key has the default shown. The decision itself is :mod:`shipway.plan.canary` (pure);
this module only reads and checks the declaration.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shipway.spec.canary_split import (
    COUNTED_KEYS,
    Split,
    read_split,
    refuse_counted,
    replica_rules,
)
from shipway.spec.check import Checker, kind_of
from shipway.spec.locate import KeyPath

AtTimeout = Literal["abort", "promote"]

KEYS = ("steps", "step_time", *COUNTED_KEYS, "at_timeout")
#: the keys of a kubernetes slot's canary (required there, refused elsewhere)
GATEWAY_KEYS = ("gateway", "prometheus")
#: backends whose proxy splits and counts a canary's requests (on kubernetes: a Gateway API
#: implementation splits, Prometheus counts)
CANARY_BACKENDS = ("local", "docker", "kubernetes")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
GATEWAY_REF = re.compile(rf"^{_DNS_LABEL}/{_DNS_LABEL}$")
#: no user or password in it: the URL is shown in plans and errors
PROMETHEUS_URL = re.compile(r"^https?://[^\s/?#@]+(/[^\s?#@]*)?$")
#: how long a request of the canary's route may go unanswered before it counts as failed
ANSWER_TIMEOUT = 30.0


@dataclass(frozen=True)
class Canary:
    """A validated canary declaration: every field is in range and ``steps`` increase to
    100. Code past the parser never re-checks it."""

    steps: tuple[int, ...] = (10, 50, 100)
    step_time: float = 30.0
    step_requests: int = 100
    error_rate: float = 0.01
    error_ratio: float = 5.0
    latency_ratio: float = 1.5
    false_abort: float = 0.01
    timeout: float = 1800.0
    at_timeout: AtTimeout = "abort"
    #: a request of the canary's route not answered (its head) within this many seconds
    #: counts as a failed request of the release it went to: a canary that hangs is caught
    #: (local and docker slots; docs/canary.md says how each proxy does it)
    answer_timeout: float = ANSWER_TIMEOUT
    #: kubernetes: the Gateway ("namespace/name") the HTTPRoute attaches to, and the
    #: Prometheus its implementation's metrics are read from
    gateway: str | None = None
    prometheus: str | None = None
    #: what sends the canary its share: a router ("gateway") or its pods' count ("replicas")
    split: Split = "gateway"

    @property
    def analysed(self) -> tuple[int, ...]:
        """The shares the canary is analysed at (every step before 100)."""
        return tuple(s for s in self.steps if s < 100)

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": list(self.steps),
            "step_time": self.step_time,
            "step_requests": self.step_requests,
            "error_rate": self.error_rate,
            "error_ratio": self.error_ratio,
            "latency_ratio": self.latency_ratio,
            "false_abort": self.false_abort,
            "timeout": self.timeout,
            "at_timeout": self.at_timeout,
            **({"gateway": self.gateway} if self.gateway else {}),
            **({"prometheus": self.prometheus} if self.prometheus else {}),
            **({"split": self.split} if self.split != "gateway" else {}),
            # said only when set, so the releases and plans of before keep their bytes
            **(
                {"answer_timeout": self.answer_timeout}
                if self.answer_timeout != ANSWER_TIMEOUT
                else {}
            ),
        }

    def rules(self) -> list[str]:
        """The rules as a plan shows them."""
        if self.split == "replicas":
            return replica_rules(self.steps, self.step_time, self.at_timeout)
        share = self.false_abort / max(1, 2 * len(self.analysed))
        answer = (
            []
            if self.gateway
            else [
                f"a canary-route request not answered within {self.answer_timeout:g}s: a failed "
                "request of the release it went to"
            ]
        )
        return [
            f"canary steps: {', '.join(f'{s}%' for s in self.steps)} of requests; each share "
            f"held at least {self.step_time:g}s and {self.step_requests} canary requests",
            f"abort: the canary's bad responses (5xx, failed or timed-out connections) above "
            f"max({self.error_rate:g}, the stable's rate) by a sequential test, or its requests "
            f"slower than {self.latency_ratio:g}x the stable's p99 (and 25 ms more) more often "
            "than 1%",
            f"false aborts: at most {self.false_abort:g} over the canary "
            f"({share:.4g} per test and step); too little traffic holds the share, and after "
            f"{self.timeout:g}s at one step: {self.at_timeout}",
            *answer,
        ]


def parse_canary(
    c: Checker, raw: Any, path: KeyPath, strategy: str | None, backend: str | None
) -> Canary | None:
    """The slot's canary (None when its strategy is not ``canary``); every problem recorded
    on ``c`` with its key path and a fix."""
    if strategy != "canary":
        if raw is not None:
            c.error(
                path,
                'applies only to a slot with strategy = "canary"',
                'add strategy = "canary", or remove it',
            )
        return None
    if backend is not None and backend not in CANARY_BACKENDS:
        c.error(
            (*path[:-1], "strategy"),
            f"canary releases run on local, docker and kubernetes slots, this slot's backend "
            f"is {backend}",
            'use strategy = "rolling"',
        )
        return None
    kube = backend == "kubernetes"
    split, raw = read_split(c, raw, path, backend)
    table = c.table({} if raw is None else raw, path, KEYS + GATEWAY_KEYS if kube else KEYS)
    if table is None or split is None:
        return None
    gateway = prometheus = None
    if split == "replicas":
        if not refuse_counted(c, table, path):
            return None
    elif kube:
        if "answer_timeout" in table:
            c.error(
                (*path, "answer_timeout"),
                "applies to local and docker slots, whose proxy is shipway's own; on "
                "kubernetes the Gateway's implementation times requests out",
                "remove it, and set the timeouts in the Gateway's implementation",
            )
            return None
        gateway, prometheus = _gateway_keys(c, table, path)
        if gateway is None or prometheus is None:
            return None
    d = Canary()
    steps = _steps(c, table.get("steps", list(d.steps)), (*path, "steps"))
    step_time = c.duration(table.get("step_time", d.step_time), (*path, "step_time"), "step_time")
    step_requests = _number(
        c,
        table.get("step_requests", d.step_requests),
        (*path, "step_requests"),
        1,
        1_000_000,
        whole=True,
    )
    error_rate = _number(
        c, table.get("error_rate", d.error_rate), (*path, "error_rate"), 0.0001, 0.5
    )
    error_ratio = _number(
        c, table.get("error_ratio", d.error_ratio), (*path, "error_ratio"), 1.5, 100
    )
    latency_ratio = _number(
        c, table.get("latency_ratio", d.latency_ratio), (*path, "latency_ratio"), 1.0, 100
    )
    false_abort = _number(
        c, table.get("false_abort", d.false_abort), (*path, "false_abort"), 0.0001, 0.2
    )
    timeout = c.duration(table.get("timeout", d.timeout), (*path, "timeout"), "canary_timeout")
    at_timeout = c.choice(
        table.get("at_timeout", d.at_timeout), (*path, "at_timeout"), ("abort", "promote")
    )
    values = (steps, step_time, step_requests, error_rate, error_ratio, latency_ratio)
    answer_timeout = c.duration(
        table.get("answer_timeout", d.answer_timeout), (*path, "answer_timeout"), "answer_timeout"
    )
    if answer_timeout is not None and answer_timeout <= 0:
        c.error((*path, "answer_timeout"), "must be above 0", 'e.g. answer_timeout = "30s"')
        return None
    if None in (*values, false_abort, timeout, at_timeout, answer_timeout):
        return None
    assert steps is not None and step_time is not None and timeout is not None
    assert step_requests is not None and error_rate is not None and error_ratio is not None
    assert latency_ratio is not None and false_abort is not None and at_timeout is not None
    assert answer_timeout is not None
    return Canary(
        steps=steps,
        step_time=step_time,
        step_requests=int(step_requests),
        error_rate=error_rate,
        error_ratio=error_ratio,
        latency_ratio=latency_ratio,
        false_abort=false_abort,
        timeout=timeout,
        at_timeout=at_timeout,  # type: ignore[arg-type]
        answer_timeout=answer_timeout,
        gateway=gateway,
        prometheus=prometheus,
        split=split,
    )


def _gateway_keys(
    c: Checker, table: dict[str, Any], path: KeyPath
) -> tuple[str | None, str | None]:
    """A kubernetes canary's Gateway and Prometheus: both required (docs/canary.md)."""
    found: list[str | None] = []
    hints = {
        "gateway": "the Gateway the canary's HTTPRoute attaches to, e.g. gateway = "
        '"gateways/web" (namespace/name)',
        "prometheus": "where the Gateway's metrics are queried, e.g. prometheus = "
        '"http://prometheus.monitoring:9090"',
    }
    patterns = {"gateway": GATEWAY_REF, "prometheus": PROMETHEUS_URL}
    whats = {
        "gateway": "Gateway reference (namespace/name)",
        "prometheus": "http(s) URL without a user or password",
    }
    for key in GATEWAY_KEYS:
        raw = table.get(key)
        if raw is None:
            c.error((*path, key), "is required for a canary on a kubernetes slot", hints[key])
            found.append(None)
            continue
        value = c.string(
            raw, (*path, key), pattern=patterns[key], what=whats[key], hint=hints[key],
            secret=key == "prometheus",
        )  # fmt: skip
        found.append(value.rstrip("/") if value and key == "prometheus" else value)
    return found[0], found[1]


def _steps(c: Checker, raw: Any, path: KeyPath) -> tuple[int, ...] | None:
    hint = "e.g. steps = [10, 50, 100]: percents that increase and end at 100"
    if not isinstance(raw, list) or not raw:
        c.error(path, f"must be a non-empty list of percents, not {kind_of(raw)}", hint)
        return None
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in raw):
        c.error(path, "must hold whole percents (integers)", hint)
        return None
    if any(not 1 <= s <= 100 for s in raw):
        c.error(path, f"{raw!r} holds a percent outside 1..100", hint)
        return None
    if any(b <= a for a, b in itertools.pairwise(raw)):
        c.error(path, f"{raw!r} does not increase", hint)
        return None
    if raw[-1] != 100:
        c.error(path, f"{raw!r} does not end at 100", hint)
        return None
    if len(raw) > 20:
        c.error(path, f"has {len(raw)} steps", "use at most 20 steps")
        return None
    return tuple(raw)


def _number(
    c: Checker, raw: Any, path: KeyPath, lo: float, hi: float, whole: bool = False
) -> float | None:
    ok = isinstance(raw, int | float) and not isinstance(raw, bool)
    if whole:
        ok = ok and isinstance(raw, int)
    if not ok or not math.isfinite(raw):
        what = "an integer" if whole else "a number"
        c.error(path, f"must be {what}, not {kind_of(raw)}", f"use a value from {lo:g} to {hi:g}")
        return None
    if not lo <= raw <= hi:
        c.error(path, f"{raw!r} is out of range", f"use a value from {lo:g} to {hi:g}")
        return None
    return float(raw)


def answer_timeout_entry(spec: Mapping[str, Any], slot: str) -> dict[str, float]:
    """The canary's ``answer_timeout`` as a release's spec snapshot holds it, for a proxy's
    canary entry: ``{"answer_timeout": seconds}`` where it is set, else nothing (the proxy's
    default is :data:`ANSWER_TIMEOUT`)."""
    slots = spec.get("slots")
    slot_doc = slots.get(slot) if isinstance(slots, Mapping) else None
    canary = slot_doc.get("canary") if isinstance(slot_doc, Mapping) else None
    value = canary.get("answer_timeout") if isinstance(canary, Mapping) else None
    if not isinstance(value, int | float) or value <= 0 or value == ANSWER_TIMEOUT:
        return {}
    return {"answer_timeout": float(value)}
