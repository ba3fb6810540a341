"""A read of a Docker canary's counts: the shared proxy's log since the last read, asked of
the engine by ``since`` alone (as shipway did) against :func:`log_since` (``since`` with a
``tail`` that grows), on test host A of scripts/docker-testenv.

A container prints ``--lines`` access-log lines of Caddy's shape (the proxy's log after a
while of traffic: every app's requests are in it), then a few each read. Interleaved rounds
read the lines of the last second both ways, in turn, for the wall time; then a block of
50 reads of each way, apart, and 2 s after it, for the engine's CPU time a read (its
``dockerd`` process's, from ``/proc``: the engine runs on this machine; it also writes the
printer's lines meanwhile, and collects the reads' garbage after them). The
canary's walk reads the counts ten times a second on every host.

Run (root, test hosts up):  .venv/bin/python bench/docker_canary_log.py [--lines 20000]
    [--rounds 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO), str(REPO / "src")]

import docker  # noqa: E402
from benchlib import Run, cpu_seconds, median  # noqa: E402
from tests.testenv.docker import DockerEnv, ensure_docker_env  # noqa: E402

from shipway.backends.docker.canary import log_since  # noqa: E402

LINE = (
    '{"level":"info","ts":1733420000.123,"logger":"http.log.access","msg":"handled request",'
    '"request":{"remote_ip":"10.0.0.1","method":"GET","host":"shop.example.com",'
    '"uri":"/version"},"status":200,"duration":0.001}'
)


#: reads in a row whose engine CPU is measured together (the kernel counts it in clock
#: ticks), then SETTLE seconds of nothing (the engine's garbage collection of their reads)
BLOCK, SETTLE = 50, 2.0


def engine_pid(socket: str) -> int:
    """The pid of the dockerd that serves ``socket`` (its config file names the socket)."""
    path = socket.removeprefix("unix://")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"dockerd"):
            continue
        words = [w.decode() for w in argv]
        config = words[words.index("--config-file") + 1] if "--config-file" in words else ""
        if path in " ".join(words) or (config and path in Path(config).read_text()):
            return int(entry.name)
    raise SystemExit(f"no dockerd serving {socket} on this machine")


def engine_cpu(pid: int, read: Callable[[float], object], count: int) -> float:
    """The engine's CPU seconds a read, over ``count`` reads of the last second's lines
    and the settling after them (the printer's few lines a second are logged meanwhile)."""
    before = cpu_seconds(pid)
    for _ in range(count):
        read(time.time() - 1)
    time.sleep(SETTLE)  # the engine's work after the reads, counted with them
    return (cpu_seconds(pid) - before) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    env: DockerEnv = ensure_docker_env()
    run = Run("docker_canary_log", vars(args) | {"json": str(args.json or "")})
    client = docker.DockerClient(base_url=env.a.socket)
    pid = engine_pid(env.a.socket)
    script = (
        f"yes '{LINE}' | head -n {args.lines}; echo printed; "
        f"while true; do echo '{LINE}'; echo '{LINE}'; sleep 0.1; done"
    )
    container = client.containers.run(env.images.v1, ["sh", "-c", script], detach=True)
    try:
        while b"printed" not in client.api.logs(container.id, tail=100):
            time.sleep(0.2)  # the printer's first lines still on their way to the log
        log = Path(client.api.inspect_container(container.id)["LogPath"])
        size = sum(f.stat().st_size for f in log.parent.glob(log.name + "*"))  # rotated too
        kinds = {
            "since": lambda since: client.api.logs(
                container.id, stdout=True, stderr=False, timestamps=True, since=since
            ).splitlines(),
            "tail": lambda since: log_since(client, str(container.id), since),
        }
        walls: dict[str, list[float]] = {k: [] for k in kinds}
        lines: dict[str, list[int]] = {k: [] for k in kinds}
        for _ in range(args.rounds):  # the wall time: interleaved rounds
            since = time.time() - 1
            for kind, read in kinds.items():
                began = time.monotonic()
                rows = read(since)
                walls[kind].append(time.monotonic() - began)
                lines[kind].append(len(rows))
        cpus: dict[str, float] = {}
        for kind, read in kinds.items():  # the engine's CPU: each kind's block apart
            cpus[kind] = engine_cpu(pid, read, BLOCK)
        figures: dict[str, object] = {"log_bytes": size}
        print(f"log of {args.lines} lines, {size / 1e6:.1f} MB (its files); {args.rounds} rounds")
        for kind in kinds:
            figures[kind] = {
                "wall_ms_median": 1000 * median(walls[kind]),
                "engine_cpu_ms_per_read": 1000 * cpus[kind],
                "lines_median": median([float(n) for n in lines[kind]]),
            }
            print(
                f"  {kind:5}: median {1000 * median(walls[kind]):7.1f} ms a read, the engine's "
                f"CPU {1000 * cpus[kind]:7.1f} ms a read, "
                f"{median([float(n) for n in lines[kind]]):.0f} lines"
            )
        ratio = median([s / t for s, t in zip(walls["since"], walls["tail"], strict=True)])
        figures["since_over_tail_wall_ratio"] = ratio
        print(f"  since alone / tail: {ratio:.1f}x the wall time (median of rounds)")
        run.finish(figures, args.json)
    finally:
        container.remove(force=True)
        client.close()


if __name__ == "__main__":
    main()
