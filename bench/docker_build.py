"""Benchmark of ``shipway deploy --build`` on the Docker test hosts: the example Flask app
(examples/notes) built on host A FROM the test Python base, pushed to the test registry,
and deployed by digest to host A — against doing the same with the Docker SDK alone.

Each run changes one source file, so both sides really build (the pip layer is cached by
the engine for both: the requirements do not change). The SDK side: ``images.build`` of the
same directory (the SDK reads .dockerignore), ``images.push``, then ``containers.run`` of
web and worker by the pushed digest, and waiting until web answers ``GET /up``. shipway
adds the plan, the lock, the records, the release command, the health gate and the proxy.
Also: an unchanged source (nothing built, ``reuse``), median.

Run (root, test hosts up):  .venv/bin/python bench/docker_build.py [--runs 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from docker_redeploy import Quiet, free_port  # noqa: E402
from tests.testenv.docker import DockerEnv, ensure_docker_env  # noqa: E402
from tests.testenv.wheelhouse import Wheelhouse, ensure_wheels  # noqa: E402

from shipway import api  # noqa: E402


def build_args(env: DockerEnv, wheels: str, address: str) -> dict[str, str]:
    return {
        "PYTHON_IMAGE": env.images.python,
        "PIP_FIND_LINKS": wheels,
        "PIP_NO_INDEX": "1",
        "PIP_TRUSTED_HOST": address,
    }


def spec(env: DockerEnv, name: str, port: int, args: dict[str, str]) -> str:
    pairs = ", ".join(f'{k} = "{v}"' for k, v in args.items())
    return f"""
[app]
name = "{name}"
image = "{env.image_prefix}/{name}"
release_command = "python3 migrate.py"
[build]
host = "{env.a.url}"
args = {{ {pairs} }}
[processes.web]
command = "gunicorn app:app"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 300
[processes.worker]
command = "python3 worker.py"
[processes.worker.healthcheck]
path = false
initial_delay = "1s"
[slots.bench]
backend = "docker"
hosts = ["{env.a.url}"]
proxy_image = "{env.images.proxy}"
proxy_port = {port}
drain_timeout = "1s"
"""


def sdk_alone(env: DockerEnv, app: Path, repository: str, args: dict[str, str]) -> float:
    """Build, push and run web + worker by digest with the SDK; seconds until web answers."""
    client = env.local_client(env.a)
    started = time.monotonic()
    tag = f"{repository}:sdk-{uuid.uuid4().hex[:8]}"
    containers = []
    try:
        client.images.build(path=str(app), tag=tag, buildargs=args, rm=True, forcerm=True)
        digest = None
        for chunk in client.api.push(repository, tag=tag.rsplit(":", 1)[1], stream=True,
                                     decode=True):  # fmt: skip
            if "error" in chunk:
                raise RuntimeError(chunk["error"])
            digest = (chunk.get("aux") or {}).get("Digest") or digest
        ref = f"{repository}@{digest}"
        web = client.containers.run(ref, ["gunicorn", "--bind", "0.0.0.0:8000", "app:app"],
                                    detach=True, ports={"8000/tcp": None})  # fmt: skip
        containers.append(web)
        containers.append(client.containers.run(ref, ["python3", "worker.py"], detach=True))
        web.reload()
        port = web.attrs["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostPort"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/up", timeout=2):
                    break
            except OSError:
                time.sleep(0.05)
        return time.monotonic() - started
    finally:
        for c in containers:
            c.remove(force=True)
        client.close()


def touch(app: Path, i: int) -> None:
    (app / "app.py").write_text((app / "app.py").read_text() + f"\n# run {i}\n")


def cleanup(env: DockerEnv, name: str) -> None:
    client = env.local_client(env.a)
    try:
        for c in client.containers.list(all=True, filters={"label": [f"org.shipway.app={name}"]}):
            c.remove(force=True)
        for n in client.networks.list(filters={"label": [f"org.shipway.app={name}"]}):
            n.remove()
    finally:
        client.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    env = ensure_docker_env()
    client = env.local_client(env.a)
    address = str(client.networks.get("bridge").attrs["IPAM"]["Config"][0]["Gateway"])
    client.close()
    house = Wheelhouse(ensure_wheels())
    wheels = house.serve(address)
    name = f"bench{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="shipway-docker-build-bench-"))
    app_dir = work / "notes"
    shutil.copytree(REPO / "examples" / "notes", app_dir)
    bargs = build_args(env, wheels, address)
    (app_dir / "shipway.toml").write_text(spec(env, name, free_port(), bargs))
    shipway_s: list[float] = []
    sdk_s: list[float] = []
    reuse_s: list[float] = []
    try:
        first = api.deploy(api.load(app_dir / "shipway.toml"), "bench", build=True,
                           reporter=Quiet())  # fmt: skip  (warms the engine's layer cache)
        assert first.ok, first.line()
        for i in range(args.runs):
            touch(app_dir, i)
            t0 = time.monotonic()
            outcome = api.deploy(api.load(app_dir / "shipway.toml"), "bench", build=True,
                                 reporter=Quiet())  # fmt: skip
            shipway_s.append(time.monotonic() - t0)
            assert outcome.ok, outcome.line()
            touch(app_dir, 100 + i)
            sdk_s.append(sdk_alone(env, app_dir, f"{env.image_prefix}/{name}", bargs))
            t0 = time.monotonic()
            again = api.deploy(api.load(app_dir / "shipway.toml"), "bench", build=True,
                               reporter=Quiet())  # fmt: skip
            reuse_s.append(time.monotonic() - t0)
            assert again.ok, again.line()
            print(f"run {i + 1}: shipway {shipway_s[-1]:.1f}s, SDK {sdk_s[-1]:.1f}s, "
                  f"unchanged {reuse_s[-1]:.1f}s", file=sys.stderr)  # fmt: skip
    finally:
        cleanup(env, name)
        house.close()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "runs": args.runs,
        "shipway_build_push_deploy_median_s": round(statistics.median(shipway_s), 2),
        "sdk_build_push_run_median_s": round(statistics.median(sdk_s), 2),
        "overhead_ratio": round(statistics.median(shipway_s) / statistics.median(sdk_s), 2),
        "unchanged_source_deploy_median_s": round(statistics.median(reuse_s), 2),
        "load_average": round(os.getloadavg()[0], 2),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
