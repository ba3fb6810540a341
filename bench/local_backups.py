"""A Postgres accessory's backup and restore on the local backend, timed: an app with a
Postgres accessory is deployed, ROWS rows of 96 random-looking characters written, then
``shipway backup`` (the server's own pg_dump, custom format) and ``shipway restore`` into a
second app's fresh slot, whose row count is read back through ``shipway run``.

    python bench/local_backups.py [--rows 200000]

Prints the dump's size, the data directory's size, the time each took (the engine's own
figure from ``-o json``, and the whole command's), and the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.backends.local.test_accessories import MIGRATE, PG_APP, SPEC  # noqa: E402
from tests.testenv.ports import free_port  # noqa: E402

from shipway.backends.local.supervisor import Supervisor  # noqa: E402

COUNT = (
    "import os, psycopg; print(psycopg.connect(os.environ['DATABASE_URL'])"
    ".execute('select count(*) from notes').fetchone()[0])"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    rows = parser.parse_args().rows
    base = Path(tempfile.mkdtemp(prefix="shipway-bench-backups-"))
    state = base / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPWAY_")}
    env.update(SHIPWAY_STATE_DIR=str(state), SHIPWAY_ROUTER_PORT=str(free_port("127.0.0.1")))

    def app(name: str) -> Path:
        where = base / name
        shutil.copytree(REPO / "examples" / "hello", where)
        (where / "pgapp.py").write_text(PG_APP)
        (where / "migrate.py").write_text(MIGRATE)
        (where / "shipway.toml").write_text(SPEC.replace('name = "hello"', f'name = "{name}"'))
        return where

    def shipway(where: Path, *args: str) -> tuple[str, float]:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "shipway", "-f", str(where / "shipway.toml"), *args],
            env=env, cwd=where, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"shipway {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout, time.monotonic() - started

    fill = (
        "import os, psycopg; c = psycopg.connect(os.environ['DATABASE_URL'], autocommit=True); "
        "c.execute(\"insert into notes (text) select md5(g::text) || md5((g*7)::text) || "
        f"md5((g*13)::text) from generate_series(1, {rows}) g\")"
    )
    try:
        first = app("hello")
        shipway(first, "deploy", "local")
        shipway(first, "run", "local", "--", "python3", "-c", fill)
        out = base / "out"
        out.mkdir()
        said, took = shipway(first, "backup", "local", "db", "--out", str(out), "-o", "json")
        made = json.loads(said)
        status, _ = shipway(first, "status", "local", "-o", "json")
        data = json.loads(status)["accessories"][0]["data_bytes"]
        print(
            f"backup: {rows} rows, data directory {data / 1e6:.1f} MB, dump "
            f"{made['bytes'] / 1e6:.1f} MB, {made['seconds']:.1f} s (command {took:.1f} s), "
            f"postgres {made['server_version']}"
        )
        second = app("other")
        shipway(second, "deploy", "local")
        said, took = shipway(
            second, "restore", "local", "db", made["path"], "--confirm", "local", "-o", "json"
        )
        counted, _ = shipway(second, "run", "local", "--", "python3", "-c", COUNT)
        print(
            f"restore into a fresh slot: {json.loads(said)['seconds']:.1f} s (command "
            f"{took:.1f} s), rows found: {counted.strip()}"
        )
        print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        Supervisor(state / "supervisor").shutdown()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
