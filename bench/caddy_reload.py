"""Requests a bare Caddy (the test proxy image) loses to its own reloads, with and without
``net.ipv4.tcp_migrate_req``, on test host A of scripts/docker-testenv: no shipway in it.

Two containers of the proxy image, one with ``tcp_migrate_req=1`` in its network namespace
and one with 0, each answering every request with a fixed body; ``--clients`` loops against
each (a new connection per request, straight to the container's address: no port
publishing in between); the two reloaded in turn ``--reloads`` times (``caddy reload`` with a
changed body, as a route switch reloads the shared proxy), ``--pause`` s apart. Every request
that fails is kept with its exception and when it started, relative to the nearest reload.

Why (docs/docker.md *A redeploy beside another app*): Caddy starts a reload's new server on a
new SO_REUSEPORT socket before it shuts the old one down, and Go's ``Server.Shutdown`` closes
a connection the old server accepted but read its request from only after the shutdown began,
without an answer (``RemoteDisconnected``).

Run (root, test hosts up):  .venv/bin/python bench/caddy_reload.py [--reloads 60]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import io
import json
import sys
import tarfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from benchlib import Run, Threads  # noqa: E402
from tests.testenv.docker import ensure_docker_env  # noqa: E402

CONFIG = "/etc/caddy-bench.json"


def config(body: str) -> bytes:
    server = {"listen": [":80"], "routes": [{"handle": [{"handler": "static_response",
                                                          "body": body}]}]}  # fmt: skip
    doc = {"admin": {"listen": "localhost:2019"}, "apps": {"http": {"servers": {"s": server}}}}
    return json.dumps(doc).encode()


def put(container: Any, data: bytes) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(CONFIG.rsplit("/", 1)[1])
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    container.put_archive(CONFIG.rsplit("/", 1)[0], buf.getvalue())


class Loops(Threads):
    """``clients`` request loops against one address, keeping every failure."""

    def __init__(self, address: str, clients: int) -> None:
        super().__init__()
        self.address, self.ok = address, 0
        self.failed: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(clients)]

    def loop(self) -> None:
        while not self.stop.is_set():
            start = time.time()
            conn = http.client.HTTPConnection(self.address, 80, timeout=10)
            try:
                conn.request("GET", "/")
                response = conn.getresponse()
                good = response.status == 200 and bool(response.read())
                error = "" if good else f"status {response.status}"
            except (OSError, http.client.HTTPException) as exc:
                error = f"{type(exc).__name__}: {exc}"[:120]
            finally:
                conn.close()
            with self.lock:
                if error:
                    self.failed.append((start, error))
                else:
                    self.ok += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--reloads", type=int, default=60, help="reloads of each proxy")
    ap.add_argument("--clients", type=int, default=3, help="request loops per proxy")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds between reloads")
    ap.add_argument("--json", type=Path, help="where the figures go")
    args = ap.parse_args()
    run = Run("caddy_reload", {k: str(v) for k, v in vars(args).items()})
    env = ensure_docker_env()
    client = env.local_client(env.a)
    tag = uuid.uuid4().hex[:6]
    proxies: dict[str, Any] = {}
    loops: dict[str, Loops] = {}
    marks: dict[str, list[float]] = {}
    with contextlib.ExitStack() as running:
        running.callback(client.close)
        for migrate in ("1", "0"):
            c = client.containers.create(
                env.images.proxy, ["caddy", "run", "--config", CONFIG],
                name=f"shipway-bench-reload-{migrate}-{tag}",
                sysctls={"net.ipv4.tcp_migrate_req": migrate},
            )  # fmt: skip
            running.callback(c.remove, force=True)
            put(c, config("ok"))
            c.start()
            c.reload()
            address = next(iter(c.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
            proxies[migrate], loops[migrate], marks[migrate] = c, Loops(address, args.clients), []
        for migrate in proxies:  # answering before the loops start
            deadline = time.monotonic() + 30
            while not _answers(loops[migrate].address):
                assert time.monotonic() < deadline, f"proxy {migrate} does not answer"
                time.sleep(0.2)
        for each in loops.values():
            running.enter_context(each)
        for i in range(args.reloads):
            for migrate, c in proxies.items():
                put(c, config(f"ok {i}"))
                marks[migrate].append(time.time())
                done = c.exec_run(["caddy", "reload", "--config", CONFIG,
                                   "--address", "localhost:2019"])  # fmt: skip
                assert done.exit_code == 0, done.output
                time.sleep(args.pause)
    figures: dict[str, Any] = {}
    for migrate, each in loops.items():
        kinds = Counter(e.split(":")[0] for _, e in each.failed)
        offsets = sorted(
            round(min((t - m for m in marks[migrate]), key=abs), 3) for t, _ in each.failed
        )
        figures[f"tcp_migrate_req={migrate}"] = {
            "reloads": args.reloads,
            "requests_ok": each.ok,
            "requests_failed": len(each.failed),
            "failed_per_reload": round(len(each.failed) / args.reloads, 2),
            "failures": dict(kinds),
            "started_s_from_reload_command": offsets,
        }
    run.finish(figures, args.json)
    for key, f in figures.items():
        print(f"{key}: {f['requests_failed']} failed of {f['requests_ok'] + f['requests_failed']} "
              f"over {f['reloads']} reloads ({f['failures']})")  # fmt: skip
    return 0


def _answers(address: str) -> bool:
    conn = http.client.HTTPConnection(address, 80, timeout=2)
    try:
        conn.request("GET", "/")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
