"""The structured diff as files: ``diff_cases/<name>.before.toml`` and ``<name>.after.toml``
are two specs, ``<name>.expected`` the exact lines the diff between their releases gives
(its ``describe()``, then ``summary: …``). An optional ``<name>.release.toml`` sets what a
spec does not hold, per side (``[before]`` / ``[after]``): ``image``, ``digest``,
``source_type``, ``working_dir``, secret values (``[before.secrets]``), and ``marks = false``
for a record made before secret marks. Adding a case needs no code.

Every case also checks: the JSON form round-trips, and no secret value of the case appears
in the lines, the summary, or the JSON.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from shipway.plan.change import Diff
from shipway.plan.diff import release_diff
from shipway.release.model import ImageMeta, Release, ReleaseStatus, SecretMarks
from shipway.spec.secrets import Secret
from tests.conftest import app_from_toml

CASES = Path(__file__).parent / "diff_cases"
NAMES = sorted(p.name.removesuffix(".before.toml") for p in CASES.glob("*.before.toml"))
SALT = "salt-shared-by-the-slots-records"


def release_of(spec: Path, side: dict[str, Any], revision: int, base: Path) -> Release:
    app = app_from_toml(spec.read_text(), base)
    slot = app.slots.get(app.slots.names()[0])
    view = app.in_slot(slot.name)
    secrets = {name: Secret(str(value)) for name, value in side.get("secrets", {}).items()}
    marks = (
        SecretMarks(SALT, {n: s.mark(SALT) for n, s in secrets.items()})
        if side.get("marks", True)
        else SecretMarks()
    )
    return Release(
        app=app.name,
        slot=slot.name,
        revision=revision,
        status=ReleaseStatus.DEPLOYED,
        image=side.get("image", view.image),
        digest=side.get("digest"),
        image_meta=ImageMeta(side.get("source_type", "dockerfile"), side.get("working_dir")),
        spec=view.snapshot(slot),
        config_hash=view.config_hash(secrets),
        secret_marks=marks,
    )


def secret_values(release_toml: dict[str, Any]) -> list[str]:
    sides = [release_toml.get(side, {}) for side in ("before", "after")]
    return [str(v) for side in sides for v in side.get("secrets", {}).values()]


def case(name: str, base: Path) -> tuple[Diff, list[str]]:
    """The diff a case gives, and the secret values it must never show."""
    extra_file = CASES / f"{name}.release.toml"
    extra = tomllib.loads(extra_file.read_text()) if extra_file.exists() else {}
    before = release_of(CASES / f"{name}.before.toml", extra.get("before", {}), 1, base)
    after = release_of(CASES / f"{name}.after.toml", extra.get("after", {}), 2, base)
    return release_diff(before, after), secret_values(extra)


@pytest.mark.parametrize("name", NAMES)
def test_case(name: str, tmp_path: Path) -> None:
    diff, secrets = case(name, tmp_path)
    found = [*diff.describe(), f"summary: {diff.summary()}"]
    expected = (CASES / f"{name}.expected").read_text().splitlines()
    assert found == expected

    doc = json.dumps(diff.to_json())
    assert Diff.from_json(json.loads(doc)) == diff
    for value in secrets:
        assert value not in "\n".join(found) and value not in doc


def test_cases_cover_every_part_of_a_release(tmp_path: Path) -> None:
    fields = {c.field.split(".")[0] for name in NAMES for c in case(name, tmp_path)[0].changes}
    assert {
        *("image", "source", "image type", "env", "secrets", "content", "replicas", "route"),
        *("process", "release command", "healthcheck", "resources", "port", "hosts"),
    } <= fields
    masked = [c for name in NAMES for c in case(name, tmp_path)[0].changes if c.masked]
    assert {c.field.split(".")[0] for c in masked} == {"env", "content"}
