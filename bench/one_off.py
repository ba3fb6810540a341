"""What ``shipway run`` costs on top of the command: ``shipway run local -- true`` against
``true`` itself, and (with ``--docker``, the test hosts up) ``shipway run`` on a Docker
host against creating, starting, waiting on and removing the same container with the
Docker SDK. Medians of several runs; prints the figures.

    python bench/one_off.py [--runs 10] [--docker]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def median_ms(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shipway(spec: Path, env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "shipway", "-f", str(spec), *args],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
    )  # fmt: skip


def local(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        app = Path(tmp) / "hello"
        shutil.copytree(REPO / "examples" / "hello", app)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHIPWAY_")}
        env.update(SHIPWAY_STATE_DIR=str(Path(tmp) / "state"), SHIPWAY_ROUTER_PORT=str(free_port()))
        spec = app / "shipway.toml"
        shipway(spec, env, "deploy", "local")
        try:
            floor = median_ms(lambda: subprocess.run(["true"], check=True), runs)
            run = median_ms(lambda: shipway(spec, env, "run", "local", "--", "true"), runs)
            help_ms = median_ms(lambda: shipway(spec, env, "--help"), runs)
        finally:
            shipway(spec, env, "stop", "local")
    print(f"true                          median {floor:7.1f} ms")
    print(f"shipway --help                median {help_ms:7.1f} ms  (the CLI's own start)")
    print(
        f"shipway run local -- true     median {run:7.1f} ms  (+{run - help_ms:.0f} ms "
        "over the CLI's start: spec, records, snapshot, env)"
    )


def docker(runs: int) -> None:
    import docker as sdk

    host = os.environ["SHIPWAY_TEST_DOCKER_A"]
    image = os.environ["SHIPWAY_TEST_IMAGE_PREFIX"] + "/web:v1"
    proxy = os.environ["SHIPWAY_TEST_PROXY_IMAGE"]
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "shipway.toml"
        spec.write_text(
            f'[app]\nname = "oneoffbench"\nimage = "{image}"\n[processes.web]\nport = 8080\n'
            f'[slots.test]\nbackend = "docker"\nhosts = ["{host}"]\nproxy_image = "{proxy}"\n'
            f"proxy_port = {free_port()}\n"
        )
        env = dict(os.environ)
        shipway(spec, env, "deploy", "test")
        client = sdk.DockerClient(base_url=host)

        def direct() -> None:
            c = client.containers.create(image, ["true"])
            c.start()
            c.wait()
            c.remove(force=True)

        try:
            sdk_ms = median_ms(direct, runs)
            run = median_ms(lambda: shipway(spec, env, "run", "test", "--", "true"), runs)
        finally:
            for c in client.containers.list(
                all=True, filters={"label": "org.shipway.app=oneoffbench"}
            ):
                c.remove(force=True)
            for n in client.networks.list(filters={"label": "org.shipway.app=oneoffbench"}):
                n.remove()
            for v in client.volumes.list(filters={"label": "org.shipway.app=oneoffbench"}):
                v.remove(force=True)
            client.close()
    print(f"docker SDK: create+start+wait+rm   median {sdk_ms:7.1f} ms")
    print(f"shipway run test -- true (docker)  median {run:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--docker", action="store_true")
    args = parser.parse_args()
    local(args.runs)
    if args.docker:
        docker(args.runs)


if __name__ == "__main__":
    main()
