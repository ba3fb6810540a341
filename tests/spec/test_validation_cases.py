"""Validation cases as files: ``<dir>/<name>.{toml,yaml}`` is a spec, ``<name>.expected``
lists every error it must produce (empty: valid). Adding a case needs no code.

``cases/`` holds specs a user writes; ``hostile/`` holds what an attacker or an accident
hands the loader (bad bytes, alias bombs, 10,000 brackets deep, endless durations): each
must end in SpecInvalid with its problems, never a traceback or a hang.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shipway.errors import SpecInvalid
from shipway.spec import load

HERE = Path(__file__).parent
CASES, HOSTILE = HERE / "cases", HERE / "hostile"
SPECS = sorted(p for d in (CASES, HOSTILE) for p in d.iterdir() if p.suffix in (".toml", ".yaml"))


def expected(case: Path) -> list[str]:
    return sorted(line for line in case.with_suffix(".expected").read_text().splitlines() if line)


def problems(case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every problem loading ``case`` as ``shipway.<suffix>`` finds, sorted."""
    spec = tmp_path / f"shipway{case.suffix}"
    shutil.copy(case, spec)
    (tmp_path / "secrets").mkdir()
    monkeypatch.chdir(tmp_path)  # problems name the file as given: "shipway.toml"
    try:
        load(spec.name)
    except SpecInvalid as exc:
        return sorted(str(p) for p in exc.problems)
    return []


@pytest.mark.parametrize("case", SPECS, ids=[f"{p.parent.name}/{p.stem}" for p in SPECS])
def test_case(case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert problems(case, tmp_path, monkeypatch) == expected(case)


def test_cases_exist_for_several_errors_in_one_file() -> None:
    counts = {p.stem: len(p.with_suffix(".expected").read_text().splitlines()) for p in SPECS}
    assert counts["many_errors"] >= 10
    assert counts["valid_minimal"] == 0


def test_every_hostile_case_is_refused() -> None:
    hostile = [p for p in SPECS if p.parent == HOSTILE]
    assert len(hostile) >= 20
    for case in hostile:
        assert case.with_suffix(".expected").read_text().strip(), f"{case.name} must fail"
