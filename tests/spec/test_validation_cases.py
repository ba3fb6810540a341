"""Validation cases as files: ``cases/<name>.{toml,yaml}`` is a spec, ``<name>.expected``
lists every error it must produce (empty: valid). Adding a case needs no code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shipway.errors import SpecInvalid
from shipway.spec import load

CASES = Path(__file__).parent / "cases"
SPECS = sorted(p for p in CASES.iterdir() if p.suffix in (".toml", ".yaml"))


@pytest.mark.parametrize("case", SPECS, ids=[p.stem for p in SPECS])
def test_case(case: Path, tmp_path: Path) -> None:
    spec = tmp_path / f"shipway{case.suffix}"
    shutil.copy(case, spec)
    (tmp_path / "secrets").mkdir()
    expected = sorted(
        line for line in case.with_suffix(".expected").read_text().splitlines() if line
    )
    try:
        load(spec)
        found: list[str] = []
    except SpecInvalid as exc:
        found = sorted(str(p) for p in exc.problems)
    assert found == expected


def test_cases_exist_for_several_errors_in_one_file() -> None:
    counts = {p.stem: len(p.with_suffix(".expected").read_text().splitlines()) for p in SPECS}
    assert counts["many_errors"] >= 10
    assert counts["valid_minimal"] == 0
