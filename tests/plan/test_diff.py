"""The parts of the structured diff the file cases do not reach: drift against the
observed target, revisions against their predecessors, masked changes, the plan's JSON."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shipway.errors import InputError
from shipway.plan import Observed, ObservedUnit, Plan
from shipway.plan.change import Change, Diff
from shipway.plan.diff import between, drift, history_diffs, plan_diff, release_diff
from shipway.release.artifact import Artifact, Unit
from shipway.release.model import Release, ReleaseStatus, SecretMarks

WEB = Unit(key="program/web@1", kind="program", process="web", body={"replicas": 2})
SNAP = Unit(key="snapshot", kind="snapshot", phase=0, body={"digest": "d"})


def release(revision: int, image: str = "reg/shop:1", **kw: object) -> Release:
    return Release(
        app="shop", slot="prod", revision=revision, status=ReleaseStatus.DEPLOYED, image=image,
        artifact=Artifact((SNAP, WEB)), spec={"env": {"A": "1"}}, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def seen(*units: ObservedUnit) -> Observed:
    return Observed.of(list(units), head="r1:deployed")


def test_drift_names_what_a_repair_would_change() -> None:
    anchor = release(1)
    same = [ObservedUnit(u.key, u.kind, u.digest, "running", u.process) for u in anchor.artifact]
    assert drift(anchor, seen(*same)) == []
    stopped = ObservedUnit(WEB.key, WEB.kind, WEB.digest, "stopped", "web")
    stray = ObservedUnit("program/old@0", "program", "x", "running", "web")
    altered = ObservedUnit(SNAP.key, SNAP.kind, "other", "present")
    assert drift(anchor, seen(altered, stopped, stray)) == [
        Change("snapshot", "live", "drifted", "altered"),
        Change("program/web@1", "live", "drifted", "stopped"),
        Change("program/old@0", "live", "drifted", "undeclared"),
    ]
    assert drift(anchor, seen())[0].headline() == "snapshot: drifted: missing from the target"
    assert plan_diff(anchor, release(2), seen(*same)).empty
    assert plan_diff(None, release(1), seen()).first


def test_each_revision_against_its_predecessor_and_unknown_revisions() -> None:
    records = [release(1), release(2, "reg/shop:2"), release(4, "reg/shop:3")]
    diffs = history_diffs(records)
    assert [diffs[n].summary() for n in (1, 2, 4)] == [
        "first release",
        "image reg/shop:1→reg/shop:2",
        "image reg/shop:2→reg/shop:3",  # r3 was pruned: r4's predecessor is r2
    ]
    assert between(records, 4).before == 2
    assert between(records, 1, 4).summary() == "image reg/shop:1→reg/shop:3"
    with pytest.raises(InputError, match=r"no revision 3 in the history \(have: r1, r2, r4"):
        between(records, 3)


def test_a_masked_change_carries_no_value_in_any_form() -> None:
    with pytest.raises(ValueError, match="a masked change carries no values"):
        Change("app", "env.TOKEN", "changed", "old", "new", masked=True)
    with pytest.raises(ValueError, match="a masked change carries no values"):
        Change("file a.ini", "content", "changed", masked=True, lines=("-token=x",))
    masked = Change("app", "env.TOKEN", "changed", masked=True)
    assert masked.to_json() == {
        "unit": "app", "field": "env.TOKEN", "kind": "changed", "old": None, "new": None,
        "masked": True, "lines": [],
    }  # fmt: skip
    assert masked.token() == "env ~TOKEN"


def test_a_plan_carries_its_diff_through_json_but_never_the_secret_marks() -> None:
    marks = SecretMarks("a-salt", {"TOKEN": "f" * 64})
    diff = Diff(1, None, (Change("web", "replicas", "changed", 2, 3),))
    the_plan = Plan(
        app="shop", slot="prod", backend="local", operation="deploy", steps=(),
        observed={"(records)": "r1:deployed"}, release=release(2, secret_marks=marks), diff=diff,
    )  # fmt: skip
    doc = the_plan.to_json()
    assert (doc["compared_with"], doc["no_changes"]) == (1, False)
    assert doc["changes"] == [diff.changes[0].to_json()]
    assert "f" * 64 not in json.dumps(doc) and "a-salt" not in json.dumps(doc)
    again = Plan.from_json(json.loads(json.dumps(doc)))
    assert again.diff == diff and again.release is not None
    assert again.release.secret_marks == SecretMarks()  # made again when it is applied
    assert "    web: replicas 2 → 3" in the_plan.describe()
    assert "f" * 64 not in repr(marks)


def test_digests_are_shown_short() -> None:
    old, new = "reg/shop@sha256:" + "1a" * 32, "reg/shop@sha256:" + "3c" * 32
    change = Change("app", "image", "changed", old, new)
    assert change.headline() == f"app: image reg/shop@{'1a' * 6} → reg/shop@{'3c' * 6}"
    assert change.token() == f"image {'1a' * 6}→{'3c' * 6}"


def test_a_section_the_differ_does_not_know_is_compared_key_by_key() -> None:
    """A snapshot section added later (volumes, build settings) shows without new code."""
    before = replace(release(1), spec={"volumes": {"data": {"path": "/app/data"}}})
    after = replace(release(2), spec={"volumes": {"data": {"path": "/srv/data"}, "cache": {}}})
    assert release_diff(before, after).changes == (
        Change("volumes", "cache", "added", None, {}),
        Change("volumes", "data.path", "changed", "/app/data", "/srv/data"),
    )


def test_a_build_the_artifact_records_is_compared_per_process() -> None:
    def built(digest: str) -> Artifact:
        body = {"replicas": 1, "dependencies": {"digest": digest}}
        return Artifact((Unit(key="program/web@1", kind="program", process="web", body=body),))

    old = "sha256:" + "aa" * 32
    new = "sha256:" + "bb" * 32
    found = release_diff(
        replace(release(1), artifact=built(old)), replace(release(2), artifact=built(new))
    )
    assert found.changes == (Change("web", "dependencies", "changed", old, new),)
    assert found.summary() == f"web dependencies {'aa' * 6}→{'bb' * 6}"


def test_a_plain_value_equal_to_a_secrets_value_is_masked_from_the_records_marks() -> None:
    # records made before such a value became the secret's placeholder: the secret's mark
    # (kept in the record only) tells the diff the plain value is that secret's
    from shipway.spec.secrets import Secret

    salt = "5a1t"
    marks = SecretMarks(salt, {"API_TOKEN": Secret("tok-value-1").mark(salt)})
    refs = {"API_TOKEN": {"from_env": "T"}}
    before = replace(release(1), spec={"env": {"A": "1"}, "secrets": refs}, secret_marks=marks)
    after = replace(
        release(2), spec={"env": {"A": "1", "COPY": "tok-value-1"}, "secrets": refs},
        secret_marks=marks,
    )  # fmt: skip
    diff = release_diff(before, after)
    assert [c.headline() for c in diff.changes] == ["app: env COPY (secret) added"]
    assert "tok-value-1" not in json.dumps(diff.to_json())


def test_nothing_of_the_release_running_all_else_in_place_is_a_stop_not_drift() -> None:
    anchor = release(1)
    snap = ObservedUnit(SNAP.key, SNAP.kind, SNAP.digest, "present")
    [change] = drift(anchor, seen(snap))  # its program gone, its snapshot in place
    assert change.headline().startswith("slot: stopped: nothing of the deployed release runs")
