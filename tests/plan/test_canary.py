"""The canary's decision (plan/canary.py, pure): abort, promote or hold from two releases'
counts, and its false-abort rate simulated; the steps a canary plan adds."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import pytest

from shipway.plan.canary import (
    P99_MIN,
    Tally,
    analyse,
    bounds,
    canary_steps,
    error_test,
    rules_of,
)
from shipway.plan.model import AnalyseCanary, ApplyObject, NoOp, ShiftTraffic, step_from_json
from shipway.release.artifact import Artifact, Unit
from shipway.spec.canary import Canary

RULES = Canary(step_time=0.0, step_requests=1)


def tally(requests: int, bad: int = 0, seconds: float = 0.01, failures: int = 0) -> Tally:
    """``requests`` answered in ``seconds`` each (``bad`` of them 5xx)."""
    t = Tally()
    i = 0 if seconds < t.base else 1 + int(math.log(seconds / t.base, t.growth))
    hist = [0] * (i + 1)
    hist[i] = requests - failures
    return Tally(requests, bad, failures, tuple(hist))


def test_a_fully_broken_canary_is_aborted_on_its_fourth_bad_response() -> None:
    stable = tally(1000)
    verdicts = [analyse(RULES, 10, tally(n, n), stable, 1.0).verdict for n in range(1, 8)]
    assert verdicts[:3] == ["hold", "hold", "hold"]
    assert verdicts[3] == "abort"  # 4 bad responses: 4 x log(5) > log(0.95 / 0.0025)
    a = analyse(RULES, 10, tally(4, 4), stable, 1.0)
    assert "errors: 4 of 4 bad" in a.why and a.line().startswith("canary 10%: 4/4 bad")


def test_connection_failures_count_as_bad() -> None:
    a = analyse(RULES, 10, tally(4, 0, failures=4), tally(1000), 1.0)
    assert a.verdict == "abort"


def test_a_good_canary_is_promoted_once_the_test_passes_and_the_step_is_long_enough() -> None:
    rules = Canary(step_time=30.0, step_requests=100)
    stable = tally(2000)
    assert analyse(rules, 10, tally(50), stable, 60.0).verdict == "hold"  # the test: undecided
    assert analyse(rules, 10, tally(200), stable, 10.0).verdict == "hold"  # 10 s of 30 s
    a = analyse(rules, 10, tally(200), stable, 31.0)
    assert a.verdict == "promote", a.why
    assert {t.name: t.state for t in a.tests} == {"errors": "passing", "latency": "passing"}


def test_no_traffic_holds_and_is_never_a_pass_or_a_failure_until_the_time_limit() -> None:
    rules = Canary(step_time=1.0, timeout=60.0)
    held = analyse(rules, 10, Tally(), Tally(), 59.0)
    assert held.verdict == "hold" and "not enough traffic" in held.why
    at_limit = analyse(rules, 10, Tally(), Tally(), 60.0)
    assert at_limit.verdict == "abort" and at_limit.timed_out and "inconclusive" in at_limit.why
    promoted = analyse(replace(rules, at_timeout="promote"), 10, Tally(), Tally(), 60.0)
    assert promoted.verdict == "promote" and promoted.timed_out


def test_the_stable_rate_is_the_yardstick_when_it_is_above_the_floor() -> None:
    # the stable fails 10 %: a canary at 15 % is not much worse, and is not aborted
    stable = tally(5000, 500)
    assert analyse(RULES, 10, tally(40, 6), stable, 1.0).verdict != "abort"
    assert error_test(RULES, tally(40, 6), stable).state != "failing"
    # against a healthy stable, the same counts abort
    assert analyse(RULES, 10, tally(40, 6), tally(5000), 1.0).verdict == "abort"


def test_a_slow_canary_is_aborted_by_the_latency_test() -> None:
    stable = tally(1000, seconds=0.010)
    slow = tally(10, seconds=0.210)  # +200 ms
    a = analyse(RULES, 10, slow, stable, 1.0)
    assert a.verdict == "abort" and a.why.startswith("latency:")
    # the stable's p99 needs P99_MIN timed requests: before that, latency holds
    few = analyse(RULES, 10, slow, tally(P99_MIN - 1, seconds=0.010), 1.0)
    assert few.verdict == "hold" and "latency: the stable has" in few.why


def test_windows_subtract_and_a_restarted_counter_counts_from_zero() -> None:
    now, before = tally(100, 10), tally(40, 4)
    window = now.minus(before)
    assert (window.requests, window.bad, sum(window.latency)) == (60, 6, 60)
    assert tally(5, 1).minus(before) == tally(5, 1)  # went back: the router restarted


def test_bounds_split_the_false_abort_rate_over_both_tests_and_every_step() -> None:
    alpha, upper, lower = bounds(Canary(steps=(10, 50, 100), false_abort=0.01))
    assert alpha == pytest.approx(0.0025)
    assert upper == pytest.approx(math.log(0.95 / 0.0025))
    assert lower == pytest.approx(math.log(0.05 / 0.9975))


def _run_canary(rng: random.Random, rules: Canary, rate: float, stable_rate: float) -> str:
    """One canary through its analysed steps, its error test checked after every canary
    request (the worst case: every look is a chance to cross the bound); a step ends at its
    first verdict. 'abort' or 'promote'."""
    for percent in rules.analysed:
        share = percent / 100
        c_req = c_bad = s_req = s_bad = 0
        while True:
            if rng.random() >= share:
                s_req += 1
                s_bad += rng.random() < stable_rate
                continue  # the canary's statistic moves with its own requests
            c_req += 1
            c_bad += rng.random() < rate
            state = error_test(rules, Tally(c_req, c_bad), Tally(s_req, s_bad)).state
            if state == "failing":
                return "abort"
            if state == "passing" and c_req >= rules.step_requests:
                break
    return "promote"


def test_simulated_false_abort_rate_of_two_identical_releases_is_within_the_declared_one() -> None:
    """1,000 canaries of two identical releases at the tolerated error rate (1 %, the
    hardest case: H0 exactly), checked after every request: the error test aborts at most
    its half of the declared false_abort (1 %: 0.5 %), with room for the simulation's own
    noise (two standard deviations); the latency test has the other half."""
    rng = random.Random(35)
    rules = Canary(step_time=0.0, step_requests=100)
    runs = 1000
    aborted = sum(_run_canary(rng, rules, 0.01, 0.01) == "abort" for _ in range(runs))
    share = rules.false_abort / 2
    assert aborted / runs <= share + 2 * math.sqrt(share * (1 - share) / runs), aborted


def test_simulated_broken_canaries_are_caught() -> None:
    rng = random.Random(36)
    rules = Canary(step_time=0.0, step_requests=100)
    fully = [_run_canary(rng, rules, 1.0, 0.0) for _ in range(50)]
    assert fully.count("abort") == 50
    partly = [_run_canary(rng, rules, 0.05, 0.0) for _ in range(200)]
    assert partly.count("abort") / 200 >= 0.9  # H1 exactly: 95 % power, less noise


def test_canary_steps_go_before_the_switch_of_a_host_already_served() -> None:
    route = Unit(key="route/a.localhost", kind="route", body={"p": 2}, phase=2, switches=True)
    program = Unit(key="program/web@2", kind="program", body={"w": 2}, phase=1, waits=True)
    artifact = Artifact((program, route))
    steps = [
        ApplyObject(unit=program.key, kind="program", action="create"),
        ApplyObject(unit=route.key, kind="route", action="update"),
    ]
    rules = Canary(steps=(10, 50, 100))
    out, why_not = canary_steps(steps, artifact, rules)
    assert why_not == ""
    assert [type(s).__name__ for s in out] == [
        "ApplyObject", "ShiftTraffic", "AnalyseCanary", "ShiftTraffic", "AnalyseCanary",
        "ApplyObject",
    ]  # fmt: skip
    assert [s.percent for s in out if isinstance(s, ShiftTraffic)] == [10, 50]
    analysis = out[2]
    assert isinstance(analysis, AnalyseCanary) and rules_of(analysis) == rules
    again = step_from_json(json.loads(json.dumps(analysis.to_json())))
    assert again == analysis  # a saved plan applies exactly these rules
    # a first deploy: the route is created, no stable to compare with
    first = [replace(steps[1], action="create")]
    same, note = canary_steps(first, artifact, rules)
    assert same == first and "no canary" in note
    assert canary_steps([NoOp(reason="x")], artifact, rules)[0] == [NoOp(reason="x")]
