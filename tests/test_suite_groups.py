"""The suite's own scheduling: the tests marked ``xdist_group(name)`` run in one worker
(``--dist loadgroup``, docs/testing.md). The real-node load tests rely on it to run one
after the other, and the Helm and Django modules to make their scenario once. pytest 9.2
with pytest-xdist 3.8 spread every group over the workers without a word; this catches it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ungrouped

GROUPED = '''
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    pass


@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
'''


def test_the_tests_of_one_xdist_group_run_in_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # none of the suite's options
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "test_grouped.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    passed = re.findall(r"\[(gw\d+)\].* PASSED (\S+)", run.stdout)
    grouped = {worker for worker, nodeid in passed if "test_grouped" in nodeid}
    assert len(passed) == 12 and len(grouped) == 1, run.stdout
    # the suite's order and its durations file see a grouped test by its own id
    assert all(ungrouped(n).endswith("]") for _, n in passed), passed
