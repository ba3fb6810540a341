from __future__ import annotations

import gzip
import json

import pytest

from shipway.errors import RecordError
from shipway.release import history
from shipway.release.artifact import Artifact, Unit
from shipway.release.codec import SCHEMA_VERSION, decode, encode, from_json, to_json
from shipway.release.model import ImageMeta, Release, ReleaseStatus

D, S, P, F = (
    ReleaseStatus.DEPLOYED,
    ReleaseStatus.SUPERSEDED,
    ReleaseStatus.PENDING,
    ReleaseStatus.FAILED,
)


def rel(n: int, status: ReleaseStatus = S, **kw: object) -> Release:
    return Release(app="a", slot="s", revision=n, status=status, **kw)  # type: ignore[arg-type]


def sample() -> Release:
    return Release(
        app="shop",
        slot="prod",
        revision=7,
        status=D,
        image="reg/shop:1",
        digest="sha256:" + "ab" * 32,
        image_meta=ImageMeta("herokuish", "/app"),
        deployment_ids={"web": "20261129-aa", "worker": "20261101-bb"},
        spec={"app": {"name": "shop"}, "processes": {"web": {}, "worker": {}}},
        config_hash="c0ffee",
        artifact=Artifact((Unit(key="k", kind="Deployment", body={"x": [1, 2]}, process="web"),)),
        description="deploy",
        actor="me@here",
    )


def test_record_round_trips_through_its_stored_form() -> None:
    r = sample()
    blob = encode(r)
    assert blob[:2] == b"\x1f\x8b"
    assert decode(blob) == r
    assert json.loads(gzip.decompress(blob))["schema"] == SCHEMA_VERSION


def test_plain_json_records_are_read_too() -> None:
    r = sample()
    assert decode(json.dumps(to_json(r)).encode()) == r


def test_schema_1_record_gives_its_global_deployment_id_to_every_process() -> None:
    data = to_json(sample())
    del data["deployment_ids"]
    data["schema"] = 1
    data["deployment_id"] = "legacy-1"
    migrated = from_json(data)
    assert migrated.deployment_ids == {"web": "legacy-1", "worker": "legacy-1"}


def test_newer_schema_is_refused_with_a_hint() -> None:
    data = to_json(sample())
    data["schema"] = SCHEMA_VERSION + 1
    with pytest.raises(RecordError, match="upgrade shipway"):
        from_json(data)


def test_corrupt_record_is_a_record_error() -> None:
    with pytest.raises(RecordError):
        decode(b"\x1f\x8bnot gzip")


def test_record_over_the_store_limit_is_refused() -> None:
    big = Release(
        app="a",
        slot="s",
        revision=1,
        status=P,
        spec={"files": {"f": __import__("os").urandom(4096).hex()}},
    )
    with pytest.raises(RecordError, match="over the 1024-byte limit"):
        encode(big, limit=1024)


def test_next_revision_and_anchor() -> None:
    records = [rel(1), rel(2, D), rel(3, F)]
    assert history.next_revision(records) == 4
    assert history.next_revision([]) == 1
    anchor = history.deployed(records)
    assert anchor is not None and anchor.revision == 2


def test_success_supersedes_the_previous_deployed() -> None:
    records = [rel(1), rel(2, D), rel(3, P)]
    written = {r.revision: r.status for r in history.promote_to_deployed(records, records[2])}
    assert written == {3: D, 2: S}


def test_history_cap_drops_oldest_first() -> None:
    records = [rel(n) for n in range(1, 13)] + [rel(13, D)]
    assert history.over_limit(records, 10) == [1, 2, 3]


def test_history_cap_never_drops_the_latest_deployed() -> None:
    records = [rel(1, D)] + [rel(n, F) for n in range(2, 14)]
    drop = history.over_limit(records, 10)
    assert 1 not in drop
    assert drop == [2, 3, 4]
    assert len(records) - len(drop) == 10


def test_image_ref_prefers_the_digest() -> None:
    r = sample()
    assert r.image_ref() == "reg/shop@sha256:" + "ab" * 32
    assert rel(1, image="localhost:5000/x:2", digest="sha256:ff").image_ref() == (
        "localhost:5000/x@sha256:ff"
    )
    assert rel(1, image="x:2").image_ref() == "x:2"
