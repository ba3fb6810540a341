"""PURE: a canary's decision from two counters, and the steps of a canary rollout.

The proxy counts, per release, the requests it answered, the bad ones among them (a 5xx
from the app, a connection refused, reset or timed out: the router's own 502/503) and a
latency histogram. From the counts of one window (one step: since its share was set) the
decision is one of three (:func:`analyse`):

* ``abort`` — one of two sequential tests (Wald's sequential probability ratio test on the
  canary's requests, each a Bernoulli trial) crossed its upper bound:

  - **errors**: H0, the canary's bad-response rate is ``q0 = max(error_rate, the stable's
    rate in the same window)``; H1, it is ``q1 = min(q0 x error_ratio, (1 + q0) / 2)``. Each
    bad canary response adds ``log(q1/q0)`` to the statistic, each good one
    ``log((1-q1)/(1-q0))``;
  - **latency**: a canary request is *slow* when it took longer than ``latency_ratio`` x the
    stable's p99 in the same window, and at least 25 ms more than it (read once the stable
    has 100 requests there): H0, 1 % of the canary's requests are slow (what a p99 means);
    H1, ``error_ratio`` times that.

  Bounds: ``A = log((1-beta)/alpha)``, ``B = log(beta/(1-alpha))`` with ``beta = 0.05``
  (a canary exactly at H1 is caught 95 % of the time) and ``alpha`` the spec's
  ``false_abort`` split evenly over both tests at every analysed step (Bonferroni), so a
  good canary is aborted at most ``false_abort`` of the time over its whole life.
* ``promote`` — both statistics at or under ``B`` (the canary is as good as H0 says), the
  step held ``step_time`` and the canary answered ``step_requests`` requests;
* ``hold`` — neither: not enough traffic yet to tell. Never a pass, never a failure
  (invariant 17) — until the step's ``timeout``, where ``at_timeout`` decides, said so.

Defaults (spec/canary.py): a fully broken canary (every request bad) is aborted on its 4th
bad response; a good one promoted after ~73 good requests. ``tests/plan/test_canary.py``
simulates the false-abort rate.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from shipway.plan.model import AnalyseCanary, ApplyObject, ShiftTraffic, Step
from shipway.release.artifact import Artifact
from shipway.spec.canary import ANSWER_TIMEOUT, Canary

Verdict = Literal["abort", "promote", "hold"]

#: the chance a canary exactly at H1 is NOT caught (the tests' power is 1 - BETA)
BETA = 0.05
#: the share of a release's requests slower than its p99
P99_SHARE = 0.01
#: stable requests needed in a window before its p99 is a yardstick
P99_MIN = 100
#: a canary request is slow only when it is also this much slower than the stable's p99
#: (seconds): a busy machine's jitter on a fast app is not a regression
LATENCY_MARGIN = 0.025


@dataclass(frozen=True)
class Tally:
    """One release's counts (since the router started, or over a window: :meth:`minus`).
    ``latency``: a histogram of seconds — bucket 0 holds what took under ``base``, bucket
    ``i`` what took ``base x growth**(i-1)`` up to ``base x growth**i``."""

    requests: int = 0
    status_5xx: int = 0
    failures: int = 0
    latency: tuple[int, ...] = ()
    base: float = 0.001
    growth: float = 1.25

    @property
    def bad(self) -> int:
        return self.status_5xx + self.failures

    def minus(self, before: Tally) -> Tally:
        """The counts since ``before`` (the same counter, read earlier). A counter that went
        back (the router restarted) is counted from zero."""
        if self.requests < before.requests:
            return self
        width = max(len(self.latency), len(before.latency))
        now = list(self.latency) + [0] * (width - len(self.latency))
        then = list(before.latency) + [0] * (width - len(before.latency))
        return Tally(
            self.requests - before.requests,
            self.status_5xx - before.status_5xx,
            self.failures - before.failures,
            tuple(max(0, a - b) for a, b in zip(now, then, strict=True)),
            self.base,
            self.growth,
        )

    def upper(self, i: int) -> float:
        return self.base * self.growth**i

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q`` quantile (None: no samples)."""
        total = sum(self.latency)
        if total == 0:
            return None
        rank = math.ceil(q * total)
        seen = 0
        for i, n in enumerate(self.latency):
            seen += n
            if seen >= rank:
                return self.upper(i)
        return self.upper(len(self.latency) - 1)  # pragma: no cover - rank <= total

    def slower_than(self, seconds: float) -> int:
        """Samples in buckets wholly above ``seconds`` (a bucket that straddles it is not
        counted: a sample is called slow only when it surely is)."""
        return sum(n for i, n in enumerate(self.latency) if i > 0 and self.upper(i - 1) >= seconds)

    def to_json(self) -> dict[str, Any]:
        p99 = self.quantile(0.99)
        return {
            "requests": self.requests,
            "bad": self.bad,
            "5xx": self.status_5xx,
            "failures": self.failures,
            "p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
            "latency": {"base": self.base, "growth": self.growth, "counts": list(self.latency)},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Tally:
        lat = doc.get("latency") or {}
        return cls(
            requests=int(doc.get("requests", 0)),
            status_5xx=int(doc.get("5xx", 0)),
            failures=int(doc.get("failures", 0)),
            latency=tuple(int(n) for n in lat.get("counts", ())),
            base=float(lat.get("base", 0.001)),
            growth=float(lat.get("growth", 1.25)),
        )


@dataclass(frozen=True)
class Sprt:
    """One sequential test's state over a window: its statistic and its bounds."""

    name: str
    llr: float
    upper: float
    lower: float
    seen: str  # what it was computed from, said in a line

    @property
    def state(self) -> str:
        if self.llr >= self.upper:
            return "failing"
        if self.llr <= self.lower:
            return "passing"
        return "undecided"

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.name,
            "llr": round(self.llr, 3),
            "abort_at": round(self.upper, 3),
            "pass_at": round(self.lower, 3),
            "state": self.state,
            "seen": self.seen,
        }


@dataclass(frozen=True)
class Analysis:
    """The decision over one window, with everything that made it."""

    verdict: Verdict
    why: str
    percent: int
    elapsed: float
    canary: Tally
    stable: Tally
    tests: tuple[Sprt, ...] = field(default_factory=tuple)
    timed_out: bool = False

    def line(self) -> str:
        if not self.tests:  # a replica-ratio canary's held step: no counts, no test
            return f"canary {self.percent}%: {self.elapsed:.1f}s: {self.verdict} ({self.why})"
        c, s = self.canary, self.stable
        return (
            f"canary {self.percent}%: {c.bad}/{c.requests} bad on the canary, "
            f"{s.bad}/{s.requests} on the stable, {self.elapsed:.1f}s: {self.verdict} ({self.why})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "percent": self.percent,
            "verdict": self.verdict,
            "why": self.why,
            "elapsed": round(self.elapsed, 3),
            "timed_out": self.timed_out,
            "canary": self.canary.to_json(),
            "stable": self.stable.to_json(),
            "tests": [t.to_json() for t in self.tests],
        }


def bounds(rules: Canary) -> tuple[float, float, float]:
    """(alpha per test, upper bound A, lower bound B)."""
    alpha = rules.false_abort / max(1, 2 * len(rules.analysed))
    return alpha, math.log((1 - BETA) / alpha), math.log(BETA / (1 - alpha))


def _llr(bad: int, good: int, q0: float, q1: float) -> float:
    return bad * math.log(q1 / q0) + good * math.log((1 - q1) / (1 - q0))


def error_test(rules: Canary, canary: Tally, stable: Tally) -> Sprt:
    _, upper, lower = bounds(rules)
    stable_rate = stable.bad / stable.requests if stable.requests else 0.0
    q0 = min(0.5, max(rules.error_rate, stable_rate))
    q1 = min(q0 * rules.error_ratio, (1 + q0) / 2)
    llr = _llr(canary.bad, canary.requests - canary.bad, q0, q1)
    seen = f"{canary.bad} of {canary.requests} bad against a tolerated {q0:.2%}"
    return Sprt("errors", llr, upper, lower, seen)


def latency_test(rules: Canary, canary: Tally, stable: Tally) -> Sprt | None:
    """None: the stable has too few timed requests in the window for a p99."""
    _, upper, lower = bounds(rules)
    p99 = stable.quantile(0.99) if sum(stable.latency) >= P99_MIN else None
    if p99 is None:
        return None
    limit = max(p99 * rules.latency_ratio, p99 + LATENCY_MARGIN)
    timed = sum(canary.latency)
    slow = canary.slower_than(limit)
    q0 = P99_SHARE
    q1 = min(q0 * rules.error_ratio, 0.5)
    seen = f"{slow} of {timed} slower than {limit * 1000:.0f} ms ({rules.latency_ratio:g}x p99)"
    return Sprt("latency", _llr(slow, timed - slow, q0, q1), upper, lower, seen)


def analyse(rules: Canary, percent: int, canary: Tally, stable: Tally, elapsed: float) -> Analysis:
    """The verdict over one window: ``canary`` and ``stable`` are its counts, ``elapsed`` its
    seconds. Deterministic: the same counts always give the same verdict."""
    errors = error_test(rules, canary, stable)
    latency = latency_test(rules, canary, stable)
    tests = (errors,) if latency is None else (errors, latency)

    def made(verdict: Verdict, why: str, timed_out: bool = False) -> Analysis:
        return Analysis(verdict, why, percent, elapsed, canary, stable, tests, timed_out)

    for test in tests:
        if test.state == "failing":
            return made("abort", f"{test.name}: {test.seen}")
    waiting: list[str] = []
    if elapsed < rules.step_time:
        waiting.append(f"{elapsed:.0f}s of {rules.step_time:g}s")
    if canary.requests < rules.step_requests:
        waiting.append(f"{canary.requests} of {rules.step_requests} canary requests")
    if errors.state != "passing":
        waiting.append(f"errors undecided: {errors.seen}")
    if latency is None:
        waiting.append(f"latency: the stable has {sum(stable.latency)} of {P99_MIN} requests")
    elif latency.state != "passing":
        waiting.append(f"latency undecided: {latency.seen}")
    if not waiting:
        return made("promote", f"errors: {errors.seen}; latency: {tests[-1].seen}")
    why = "; ".join(waiting)
    if elapsed >= rules.timeout:
        return made(
            rules.at_timeout,
            f"inconclusive after {rules.timeout:g}s (too little traffic: {why}); "
            f'at_timeout = "{rules.at_timeout}"',
            timed_out=True,
        )
    return made("hold", f"not enough traffic yet: {why}")


# -- the plan --------------------------------------------------------------------------


def canary_steps(
    steps: Sequence[Step], artifact: Artifact, rules: Canary, *, sticky: bool = True
) -> tuple[list[Step], str]:
    """A rollout's steps with the canary's before its switch: each analysed share set
    (``ShiftTraffic``) and analysed (``AnalyseCanary``) before the first unit that moves an
    existing host to the new release; the switch itself is the 100 % step, after which the
    stable drains and goes as in any rollout. Nothing switches an existing host (a first
    deploy, or a release whose routes stay): the steps as they are, and a note saying why.
    ``sticky``: the backend's split keeps a client on its side (a Gateway whose
    implementation sets no cookie does not)."""
    moving = [
        i
        for i, s in enumerate(steps)
        if isinstance(s, ApplyObject) and s.action == "update" and _switches(artifact, s.unit)
    ]
    if not moving:
        return list(steps), "no canary: no host served by a stable release moves (first deploy?)"
    declared = json.dumps(rules.to_json(), sort_keys=True)
    first = moving[0]
    added: list[Step] = []
    for percent in rules.analysed:
        added.append(ShiftTraffic(percent=percent, sticky=sticky))
        added.append(AnalyseCanary(percent=percent, rules=declared))
    return [*steps[:first], *added, *steps[first:]], ""


def _switches(artifact: Artifact, key: str) -> bool:
    return any(u.key == key and u.switches for u in artifact)


def rules_of(step: AnalyseCanary) -> Canary:
    """The rules a plan's analysis step carries (a saved plan applies exactly those)."""
    doc = json.loads(step.rules)
    return Canary(
        steps=tuple(int(s) for s in doc["steps"]),
        step_time=float(doc["step_time"]),
        step_requests=int(doc["step_requests"]),
        error_rate=float(doc["error_rate"]),
        error_ratio=float(doc["error_ratio"]),
        latency_ratio=float(doc["latency_ratio"]),
        false_abort=float(doc["false_abort"]),
        timeout=float(doc["timeout"]),
        at_timeout=doc["at_timeout"],
        answer_timeout=float(doc.get("answer_timeout", ANSWER_TIMEOUT)),
    )
