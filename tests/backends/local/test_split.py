"""The router's canary split (split.py): which side a request goes to, and the counts."""

from __future__ import annotations

from typing import Any

from shipway.backends.local import split
from shipway.plan.canary import Tally

ENTRY: dict[str, Any] = {
    "program": "program/web@a",
    "upstreams": ["127.0.0.1:1"],
    "canary": {
        "id": "app.slot.r2",
        "program": "program/web@b",
        "upstreams": ["127.0.0.1:2"],
        "weight": 10,
    },
}


def test_no_canary_no_choice_and_the_stable_upstreams() -> None:
    plain = {"program": "p", "upstreams": ["127.0.0.1:1"]}
    assert split.choose(plain, {}) is None
    assert split.upstreams_of(plain, split.CANARY) == ["127.0.0.1:1"]  # an ended canary
    assert split.upstreams_of(ENTRY, split.CANARY) == ["127.0.0.1:2"]


def test_the_header_picks_a_side_and_sets_no_cookie() -> None:
    always = split.choose(ENTRY, {split.HEADER: b"always"})
    never = split.choose(ENTRY, {split.HEADER: b" Never "})
    assert always is not None and always.side == split.CANARY and always.cookie is None
    assert never is not None and never.side == split.STABLE and never.cookie is None


def test_a_cookie_of_this_canary_keeps_its_bucket_and_another_canarys_is_ignored() -> None:
    on = split.choose(ENTRY, {b"cookie": b"a=1; shipway-canary=app.slot.r2.3"})
    off = split.choose(ENTRY, {b"cookie": b"shipway-canary=app.slot.r2.42"})
    assert on is not None and on.side == split.CANARY and on.cookie is None
    assert off is not None and off.side == split.STABLE and off.cookie is None
    old = split.choose(ENTRY, {b"cookie": b"shipway-canary=app.slot.r1.3"})
    assert old is not None and old.cookie is not None  # a new bucket for this canary
    assert old.cookie.startswith(b"shipway-canary=app.slot.r2.")


def test_without_a_cookie_the_weight_splits_requests() -> None:
    sides = [split.choose(ENTRY, {}) for _ in range(4000)]
    share = sum(c is not None and c.side == split.CANARY for c in sides) / 4000
    assert 0.07 < share < 0.13
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    choice = sides[0]
    assert choice is not None
    out = split.with_cookie(head, choice)
    assert out.endswith(b"\r\nSet-Cookie: " + (choice.cookie or b"") + b"\r\n\r\n")


def test_the_tally_counts_per_side_and_its_histogram_reads_back() -> None:
    tally = split.Tally()
    canary = split.Choice("app.slot.r2", split.CANARY, None)
    stable = split.Choice("app.slot.r2", split.STABLE, None)
    tally.answered(canary, 500)
    tally.answered(canary, 200)
    tally.failed(canary)
    tally.answered(stable, 200)
    tally.answered(None, 500)  # a host without a canary: not counted
    doc = tally.snapshot()["canaries"]["app.slot.r2"]
    c = Tally.from_json(doc["canary"])
    assert (c.requests, c.status_5xx, c.failures, c.bad, sum(c.latency)) == (3, 1, 1, 2, 2)
    assert Tally.from_json(doc["stable"]).requests == 1
    p99 = c.quantile(0.99)
    assert p99 is not None and p99 < 1.0
    tally.forget({"other"})
    assert tally.snapshot()["canaries"] == {}


def test_a_request_not_answered_within_the_answer_timeout_counts_once_as_failed() -> None:
    tally = split.Tally()
    entry = {**ENTRY, "canary": {**ENTRY["canary"], "answer_timeout": 2.0}}
    hung = tally.begin(split.choose(entry, {split.HEADER: b"always"}))
    quick = tally.begin(split.choose(entry, {split.HEADER: b"always"}))
    assert hung is not None and quick is not None and hung.patience == 2.0
    assert tally.snapshot()["canaries"] == {}  # both still within their time
    hung.started -= 2.5  # its answer has not come for 2.5 s
    c = Tally.from_json(tally.snapshot()["canaries"]["app.slot.r2"]["canary"])
    assert (c.requests, c.failures) == (1, 1)
    tally.answered(hung, 200)  # its answer comes after all: counted already
    tally.answered(quick, 200)
    c = Tally.from_json(tally.snapshot()["canaries"]["app.slot.r2"]["canary"])
    assert (c.requests, c.failures, sum(c.latency)) == (2, 1, 1)


def test_a_request_whose_client_went_away_is_not_counted_and_the_default_is_30s() -> None:
    tally = split.Tally()
    gone = tally.begin(split.choose(ENTRY, {split.HEADER: b"always"}))
    assert gone is not None and gone.patience == 30.0
    gone.started -= 60
    del gone  # the exchange ended without an answer (its client left): nothing holds it
    assert tally.snapshot()["canaries"] == {}
    assert tally.begin(None) is None  # a host without a canary: nothing to wait for
