"""A Postgres restore's swap on Kubernetes, watched for real on the test plane's real node:
a client loop in the accessory's pod (started in the background by an exec, its answers in
a file of the pod) asks, again and again, which database carries the app's name and how
many rows it holds, through a restore by the real CLI. The name always names a database,
switched once from the old to the restored one; a client is told only what a swap may tell
it (tests/backends/test_backups.py, ``swap_seen``; the Docker test has the reasons)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.test_backups import SWAP_LOOP, swap_seen

from .conftest import Slot
from .test_accessories import WEB, mirror, static_volume
from .test_backups import PSQL, backed_up, sh
from .test_real_pods import app_name, image

__all__ = ["mirror"]  # the fixture, used by name

pytestmark = [pytest.mark.k8s, pytest.mark.real_node, pytest.mark.timeout(600)]

#: the loop with the pod's own credentials, in the background, its answers in a file
BACKGROUND = (
    'export PGPASSWORD="$POSTGRES_PASSWORD" PGUSER="$POSTGRES_USER" PGHOST=127.0.0.1; '
    "rm -f /tmp/shipway-test-stop; "
    "nohup sh -c '{loop}' sh \"$POSTGRES_DB\" > /tmp/shipway-test-loop 2>&1 < /dev/null &"
)


@pytest.fixture
def claim(real_slot: Slot, tmp_path: Path) -> Iterator[None]:
    yield from static_volume(real_slot, f"data-{app_name(real_slot)}-acc-db-0", tmp_path / "pv")


def test_swap_watched(real_slot: Slot, claim: None, mirror: str, tmp_path: Path) -> None:
    s = real_slot
    name = app_name(s)
    s.write(WEB, name=name, image=image("v1"))
    r = s.cli("deploy", "test1", timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    pod = f"{name}-acc-db-0"
    sql = "create table notes (id serial primary key, text text); "
    sql += "insert into notes (text) select 'kept' from generate_series(1, 3)"
    sh(s, pod, "postgres", PSQL + f'"{sql}"')
    path = Path(backed_up(s, "db", tmp_path)["path"])
    more = "insert into notes (text) select 'later' from generate_series(1, 4)"
    sh(s, pod, "postgres", PSQL + f'"{more}"')
    sh(s, pod, "postgres", BACKGROUND.format(loop=SWAP_LOOP.replace("'", "'\\''")))

    def answers() -> list[str]:
        return sh(s, pod, "postgres", "cat /tmp/shipway-test-loop").splitlines()

    deadline = time.monotonic() + 60
    while "rows:7" not in answers():
        assert time.monotonic() < deadline, answers()[-5:]
        time.sleep(0.3)
    r = s.cli("restore", "test1", "db", str(path), "--confirm", "test1")
    assert r.returncode == 0, r.stderr
    assert "both renames or neither" in r.stdout
    seen = len(answers())
    while "rows:3" not in answers()[seen:]:
        assert time.monotonic() < deadline + 120, answers()[-5:]
        time.sleep(0.3)
    sh(s, pod, "postgres", "touch /tmp/shipway-test-stop")
    print(swap_seen(answers(), "7", "3"))
    dbs = sh(s, pod, "postgres", PSQL + "'select datname from pg_database'").split()
    assert name in dbs and not [n for n in dbs if n.startswith(f"{name}.")], dbs
