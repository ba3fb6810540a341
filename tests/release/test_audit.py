"""The audit a release record carries (release/audit.py): it round-trips through the
stored form every backend keeps (release/codec.py), a record written before it existed
reads as having none, and it says who in one phrase."""

from __future__ import annotations

from dataclasses import replace

from shipway.release import codec
from shipway.release.audit import Audit
from shipway.release.model import Release, ReleaseStatus

#: every field set (the backends' tests write it to their targets and read it back)
AUDIT = Audit(
    user="ada",
    host="build-3",
    commit="0f06048b5eda1c2d3e4f5a6b7c8d9e0f1a2b3c4d+dirty",
    author="Ada Lovelace <ada@example.org>",
    ci={"system": "github-actions", "actor": "octocat", "url": "https://ci.example/r/1"},
    clearance=("confirm", "take-host", "break-glass"),
    break_glass="incident 4711",
    summary="image 1a2b…→3c4d…, env ~GREETING",
    operation="deploy",
)


def test_the_audit_round_trips_and_an_older_record_has_none() -> None:
    release = Release("shop", "prod", 3, ReleaseStatus.DEPLOYED, image="x:1", audit=AUDIT)
    assert codec.decode(codec.encode(release)).audit == AUDIT
    older = codec.to_json(replace(release, audit=None))
    del older["audit"]
    assert codec.from_json(older).audit is None
    assert release.summary()["audit"]["break_glass"] == "incident 4711"


def test_who_in_one_phrase() -> None:
    assert AUDIT.who() == "ada@build-3 (ci github-actions octocat) at 0f06048b5eda"
    assert Audit("bob", "laptop").who() == "bob@laptop"
