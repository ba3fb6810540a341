"""The HTTP router: one long-running process per router port, supervised like the apps.

Run as ``python router.py --port 8800 --tables DIR --control SOCKET`` (standalone: aiohttp,
the standard library and its sibling ``routetable.py`` only, so it starts fast and never
imports shipway).

* Routes by Host header (port stripped, lowercased) to the upstreams (127.0.0.1:<port> of
  each instance) of the program the host points at, round-robin.
* The table is the JSON files in ``--tables`` (one per app and slot, and one per generation
  of a blue-green slot, written atomically by the backend; the newest claim of a host wins:
  :mod:`routetable`); ``POST /reload`` on the control socket re-reads them and swaps the
  whole table in one assignment, so a switch is atomic: a request is routed either before
  it (old upstream) or after it (new upstream), never to a mix.
* Every request is counted against its upstream while it is in flight. The counter moves
  in the same event-loop step as the lookup, so once ``/reload`` has answered, every
  request that could still reach an old upstream is already counted, and
  ``POST /drain`` returns only when those requests have finished: this is what lets the
  backend stop an old process without dropping a request.
* Control API (unix socket, mode 0600): ``POST /reload``, ``GET /status``,
  ``POST /drain {"upstreams": [...], "timeout": seconds}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web
from aiohttp.client_exceptions import ClientConnectorError, ServerDisconnectedError
from yarl import URL

if __package__:  # imported as part of shipway (tests)
    from shipway.backends.local.routetable import load_table
else:  # run as a script: its own directory is on sys.path, shipway is never imported
    from routetable import load_table  # type: ignore[import-not-found,no-redef]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})


class Router:
    def __init__(self, port: int, tables: Path) -> None:
        self.port = port
        self.tables = tables
        self.table: dict[str, dict[str, Any]] = {}
        self.inflight: Counter[str] = Counter()
        self.turns: dict[str, itertools.count[int]] = {}
        self.session: ClientSession | None = None
        self.reloaded_at = 0.0

    def reload(self) -> int:
        notes: list[str] = []
        table = load_table(self.tables, notes)
        for note in notes:
            print(f"router: {note}", file=sys.stderr, flush=True)
        self.table = table  # one assignment: the switch is atomic
        self.turns = {}
        self.reloaded_at = time.time()
        return len(table)

    def pick(self, host: str, avoid: frozenset[str] = frozenset()) -> str | None:
        entry = self.table.get(host)
        if entry is None:
            return None
        ups = [u for u in entry["upstreams"] if u not in avoid]
        if not ups:
            return None
        turn = next(self.turns.setdefault(host, itertools.count()))
        return str(ups[turn % len(ups)])

    # -- the public side -----------------------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        host = (request.host or "").rsplit(":", 1)[0].strip("[]").lower()
        entry = self.table.get(host)
        if entry is None:
            known = ", ".join(sorted(self.table)) or "none"
            return web.Response(
                status=404,
                text=f"shipway router: no app is served at {host!r} here (hosts: {known})\n",
            )
        tried: set[str] = set()
        body = request.body_exists
        while True:
            upstream = self.pick(host, frozenset(tried))
            if upstream is None:
                return web.Response(
                    status=502 if tried else 503,
                    text=f"shipway router: no running instance serves {host!r}\n",
                )
            self.inflight[upstream] += 1  # same loop step as the lookup: see the module doc
            try:
                return await self.forward(request, upstream)
            except ClientConnectorError:
                tried.add(upstream)  # nothing was sent: another instance may take it
            except ServerDisconnectedError:
                if body or request.method not in IDEMPOTENT or upstream in tried:
                    return web.Response(status=502, text="shipway router: upstream closed\n")
                tried.add(upstream)
            except (TimeoutError, ClientError) as exc:
                return web.Response(status=502, text=f"shipway router: upstream failed: {exc}\n")
            finally:
                self.inflight[upstream] -= 1
                if self.inflight[upstream] <= 0:
                    del self.inflight[upstream]

    async def forward(self, request: web.BaseRequest, upstream: str) -> web.StreamResponse:
        assert self.session is not None
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        peer = request.remote or ""
        prior = request.headers.get("X-Forwarded-For")
        headers.append(("X-Forwarded-For", f"{prior}, {peer}" if prior else peer))
        headers.append(("X-Forwarded-Proto", request.scheme))
        headers.append(("X-Forwarded-Host", request.host or ""))
        url = URL(f"http://{upstream}{request.raw_path}", encoded=True)
        async with self.session.request(
            request.method,
            url,
            headers=headers,
            data=request.content if request.body_exists else None,
            allow_redirects=False,
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
        ) as upstream_response:
            response = web.StreamResponse(
                status=upstream_response.status, reason=upstream_response.reason
            )
            for k, v in upstream_response.headers.items():
                if k.lower() not in HOP_BY_HOP:
                    response.headers.add(k, v)
            await response.prepare(request)
            if request.method != "HEAD":
                async for chunk in upstream_response.content.iter_any():
                    await response.write(chunk)
            await response.write_eof()
            return response

    # -- the control side ----------------------------------------------------------

    async def control_reload(self, request: web.Request) -> web.Response:
        return web.json_response({"hosts": self.reload()})

    async def control_status(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "port": self.port,
                "pid": os.getpid(),
                "hosts": {h: e["upstreams"] for h, e in self.table.items()},
                "programs": {h: e["program"] for h, e in self.table.items()},
                "owners": {
                    h: {"app": e["app"], "slot": e["slot"], "generation": e["generation"]}
                    for h, e in self.table.items()
                },
                "inflight": dict(self.inflight),
                "reloaded_at": self.reloaded_at,
            }
        )

    async def control_drain(self, request: web.Request) -> web.Response:
        doc = await request.json()
        upstreams = [str(u) for u in doc.get("upstreams", [])]
        deadline = time.monotonic() + float(doc.get("timeout", 30.0))
        while True:
            busy = sum(self.inflight.get(u, 0) for u in upstreams)
            if busy == 0:
                return web.json_response({"drained": True, "inflight": 0})
            if time.monotonic() > deadline:
                return web.json_response({"drained": False, "inflight": busy})
            await asyncio.sleep(0.01)


async def serve(port: int, tables: Path, control: Path) -> None:
    router = Router(port, tables)
    router.reload()
    public = web.Server(router.handle, access_log=None)
    public_runner = web.ServerRunner(public, handle_signals=False)
    await public_runner.setup()
    await web.TCPSite(public_runner, "127.0.0.1", port).start()
    router.session = ClientSession(
        connector=TCPConnector(limit=0, force_close=False),
        timeout=ClientTimeout(total=None, sock_connect=5),
        auto_decompress=False,
    )
    with contextlib.suppress(OSError):  # IPv6 loopback when the machine has it
        await web.TCPSite(public_runner, "::1", port).start()

    app = web.Application()
    app.router.add_post("/reload", router.control_reload)
    app.router.add_get("/status", router.control_status)
    app.router.add_post("/drain", router.control_drain)
    control_runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await control_runner.setup()
    with contextlib.suppress(FileNotFoundError):
        control.unlink()
    await web.UnixSite(control_runner, str(control)).start()
    os.chmod(control, 0o600)
    print(f"router: serving 127.0.0.1:{port}, control {control}", file=sys.stderr, flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await control_runner.cleanup()
    await public_runner.cleanup()
    await router.session.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="shipway's local HTTP router")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tables", type=Path, required=True)
    parser.add_argument("--control", type=Path, required=True)
    args = parser.parse_args(argv)
    args.tables.mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(serve(args.port, args.tables, args.control))
    except OSError as exc:
        print(f"router: cannot serve on 127.0.0.1:{args.port}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
