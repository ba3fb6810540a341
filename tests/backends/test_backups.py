"""The backup file on every backend: its checksum beside it, and what a restore refuses
before anything is touched (a file not whole, without its checksum, of another kind)."""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.backups import partial_path, pg_major, seal, verified
from shipway.errors import InputError


def made(tmp_path: Path, body: bytes, name: str = "db.dump") -> Path:
    path = tmp_path / name
    partial = partial_path(path)
    partial.write_bytes(body)
    digest, size = seal(partial, path)
    assert (digest, size) == (hashlib.sha256(body).hexdigest(), len(body))
    assert not partial.exists()
    return path


def test_a_sealed_backup_verifies_and_its_checksum_reads_as_sha256sum_writes_it(
    tmp_path: Path,
) -> None:
    path = made(tmp_path, b"PGDMP\x01\x0e rest of a dump")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (tmp_path / "db.dump.sha256").read_text() == f"{digest}  db.dump\n"
    assert verified(path, "postgres", "db") == digest


def test_a_changed_byte_a_missing_checksum_and_another_kind_are_refused(tmp_path: Path) -> None:
    path = made(tmp_path, b"PGDMP\x01\x0e rest of a dump")
    path.write_bytes(b"PGDMP\x01\x0e rest of a dumq")
    with pytest.raises(InputError, match="corrupted"):
        verified(path, "postgres", "db")
    snapshot = made(tmp_path, b"REDIS0011\xfa", "cache.rdb")
    with pytest.raises(InputError, match="is a redis backup, and accessory db is postgres"):
        verified(snapshot, "postgres", "db")
    (tmp_path / "cache.rdb.sha256").unlink()
    with pytest.raises(InputError, match=r"checksum file cache\.rdb\.sha256 is missing"):
        verified(snapshot, "redis", "cache")


def test_a_long_dump_says_how_far_it_got(tmp_path: Path) -> None:
    from shipway.backends.backups import watch_growth

    said: list[str] = []
    growing = tmp_path / "partial"
    growing.write_bytes(b"x" * 3 * 1024 * 1024)
    tick = watch_growth(growing, "pg_dump", said.append, every=0.0)
    tick()
    assert len(said) == 1 and said[0].startswith("  pg_dump: 3.0 MiB written, ")
    quiet = watch_growth(growing, "pg_dump", said.append, every=3600.0)
    quiet()  # within its interval: nothing said yet
    assert len(said) == 1


def test_a_tools_major_version_is_read_from_its_version_line() -> None:
    assert pg_major("pg_dump (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)") == "15"
    assert pg_major("15.18") == "15" and pg_major("16.2") == "16"
    assert pg_major("pg_dump (PostgreSQL) 9.6.24") == "9.6"
    assert pg_major("no version here") == ""



def sealed(stdout: str) -> dict[str, Any]:
    """``shipway backup -o json``'s document, once its file is what it says: its SHA-256
    and size, the checksum file beside it as ``sha256sum -c`` reads it, the file 0600 (the
    backend tests' check of every backup they make)."""
    doc: dict[str, Any] = json.loads(stdout)
    path = Path(doc["path"])
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert doc["sha256"] == digest and doc["bytes"] == path.stat().st_size
    assert Path(doc["checksum_file"]).read_text() == f"{digest}  {path.name}\n"
    assert path.stat().st_mode & 0o777 == 0o600
    check = subprocess.run(["sha256sum", "-c", Path(doc["checksum_file"]).name], cwd=path.parent)
    assert check.returncode == 0
    return doc


#: a client loop for a restore's swap, in the accessory's container or pod (its environment
#: holding what psql needs): which database carries the name ``$1`` (its oid) and how many
#: rows its ``notes`` has, one line each, until /tmp/shipway-test-stop exists
SWAP_LOOP = r"""
while [ ! -e /tmp/shipway-test-stop ]; do
  echo "oid:$(psql -X -At -d postgres -c "select oid from pg_database where datname = '$1'" 2>&1 \
    | tr '\n' ' ' | sed 's/ *$//')"
  echo "rows:$(psql -X -At -d "$1" -c 'select count(*) from notes' 2>&1 | tr '\n' ' ' \
    | sed 's/ *$//')"
done
"""


def swap_seen(lines: list[str], before: str, after: str) -> str:
    """What the loop saw across a restore, checked: the name always named a database (its
    oid always read, never empty), switched once, from the old to the restored one; each
    count ``before`` or ``after``; every other answer a refusal a client may get while the
    swap runs. A line saying what it saw."""
    oids = [line.removeprefix("oid:") for line in lines if line.startswith("oid:")]
    rows = [line.removeprefix("rows:") for line in lines if line.startswith("rows:")]
    assert all(o.isdigit() for o in oids if o), [o for o in oids if not o.isdigit()]
    assert "" not in oids, "the app's database name named nothing at some moment"
    switched = [b for a, b in itertools.pairwise(oids) if a != b]
    assert len(switched) == 1 and len(set(oids)) == 2, oids
    assert {before, after} <= set(rows), rows
    others = [r for r in rows if r not in (before, after)]
    # what a client can be told meanwhile: its session ended, new ones refused a moment, or
    # (one that arrived within the renames' transaction: it looked the name up before the
    # commit, and Postgres checks the name again after) "just been dropped or renamed"
    allowed = (
        "terminating connection",
        "not currently accepting connections",
        "server closed",
        "It seems to have just been dropped or renamed",
    )
    assert all(any(a in r for a in allowed) for r in others), others
    renamed = [r for r in others if "just been dropped or renamed" in r]
    return (
        f"{len(oids)} answers; {len(rows) - len(others)} row counts, {len(others)} refused "
        f"({len(renamed)} within the renames' transaction)"
    )
