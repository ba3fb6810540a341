"""The backend's side of the router: its supervised program, its table files, its control
socket. The router process itself is :mod:`.router`."""

from __future__ import annotations

import http.client
import json
import sys
import time
import xmlrpc.client
from pathlib import Path
from typing import Any

from shipway.backends.local.dirs import private_dir, socket_path, write_json
from shipway.backends.local.routetable import load_table
from shipway.backends.local.supervisor import Supervisor, _UnixConnection, program_conf, state_of
from shipway.errors import BackendError

ROUTER_SCRIPT = Path(__file__).with_name("router.py")
READY_TIMEOUT = 15.0


class RouterControl:
    def __init__(self, root: Path, port: int, supervisor: Supervisor) -> None:
        self.port = port
        self.dir = root / "router" / str(port)
        self.tables = self.dir / "tables"
        self.log = self.dir / "router.log"
        self.sock = socket_path(self.dir / "control.sock")
        self.supervisor = supervisor
        self.name = f"sw-router-{port}"

    # -- control socket --------------------------------------------------------------

    def _request(
        self, method: str, path: str, doc: Any = None, timeout: float = 10.0
    ) -> dict[str, Any]:
        conn = _UnixConnection(str(self.sock), timeout)
        try:
            body = json.dumps(doc).encode() if doc is not None else None
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            if response.status != 200:
                raise BackendError(f"router {path} answered {response.status}: {raw[:200]!r}")
            result = json.loads(raw)
            return result if isinstance(result, dict) else {}
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise BackendError(
                f"the router on port {self.port} did not answer {path}: {exc}"
            ) from exc
        finally:
            conn.close()

    def answering(self) -> bool:
        if not self.sock.exists():
            return False
        try:
            self._request("GET", "/status", timeout=2.0)
        except BackendError:
            return False
        return True

    def status(self) -> dict[str, Any]:
        return self._request("GET", "/status")

    def canary_counts(self) -> dict[str, Any]:
        """Every canary's counts per release (``split.Tally``); none while it is down."""
        if not self.sock.exists():
            return {}
        return self._request("GET", "/canary")

    def reload(self) -> int:
        return int(self._request("POST", "/reload").get("hosts", 0))

    def drain(self, upstreams: list[str], timeout: float) -> tuple[bool, int]:
        result = self._request(
            "POST", "/drain", {"upstreams": upstreams, "timeout": timeout}, timeout=timeout + 10
        )
        return bool(result.get("drained")), int(result.get("inflight", 0))

    # -- tables ----------------------------------------------------------------------

    def table_file(self, app: str, slot: str, generation: str | None = None) -> Path:
        """``<app>.<slot>.json`` (rolling), ``<app>.<slot>@<generation>.json`` (a generation's
        claims): see :mod:`.routetable`."""
        return self.tables / (
            f"{app}.{slot}@{generation}.json" if generation else f"{app}.{slot}.json"
        )

    def generation_tables(self, app: str, slot: str) -> dict[str, Path]:
        """generation -> its table file, for every generation table of the slot here."""
        prefix = f"{app}.{slot}@"
        return {
            p.name[len(prefix) : -len(".json")]: p
            for p in sorted(self.tables.glob(f"{app}.{slot}@*.json"))
            if p.name.startswith(prefix)
        }

    def write_table(
        self, app: str, slot: str, hosts: dict[str, Any], generation: str | None = None
    ) -> None:
        doc: dict[str, Any] = {"app": app, "slot": slot, "hosts": hosts}
        if generation:
            doc["generation"] = generation
        write_json(self.table_file(app, slot, generation), doc)

    def table(self) -> dict[str, dict[str, Any]]:
        """The winning claim of each host, read from the table files (the router need not
        run): what the router serves after its next reload."""
        return load_table(self.tables)

    # -- the supervised program ------------------------------------------------------

    def ensure(self, wait: bool = True) -> None:
        """Make sure the router program runs (starting supervisord if needed); with
        ``wait``, until its control socket answers."""
        self.supervisor.ensure()
        state = state_of(self.supervisor.info().get(self.name))
        if state not in ("STARTING", "RUNNING", "BACKOFF"):
            self.dir.mkdir(parents=True, exist_ok=True)
            self.tables.mkdir(parents=True, exist_ok=True)
            private_dir(self.sock.parent)
            conf = program_conf(
                self.name,
                [
                    sys.executable,
                    str(ROUTER_SCRIPT),
                    "--port",
                    str(self.port),
                    "--tables",
                    str(self.tables),
                    "--control",
                    str(self.sock),
                ],
                self.dir,
                self.log,
                startsecs=1,
                startretries=2,
                stopwaitsecs=30,
            )
            try:
                self.supervisor.add(self.name, conf)
            except xmlrpc.client.Fault as exc:  # pragma: no cover - add translates faults
                raise BackendError(str(exc)) from exc
        if wait:
            self.wait_ready()

    def holds_port(self, holder: int | None) -> bool:
        """Whether the process ``holder`` (listening on the port) is this port's router as
        supervisord runs it: started and not answering yet, as right after a run that
        started it was killed, or on a loaded machine."""
        info = self.supervisor.info().get(self.name)
        return (
            holder is not None
            and state_of(info) in ("STARTING", "RUNNING")
            and int((info or {}).get("pid") or 0) == holder
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.answering():
            state = state_of(self.supervisor.info().get(self.name))
            if state in ("FATAL", "ABSENT") or time.monotonic() > deadline:
                raise BackendError(self._why_down(state))
            time.sleep(0.02)

    def _why_down(self, state: str) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()[-1:]
        except OSError:
            lines = []
        last = " | ".join(lines) or "no output"
        return (
            f"the router could not serve 127.0.0.1:{self.port} (state {state}; its log says: "
            f"{last}) (hint: if another program uses port {self.port}, choose another with "
            "SHIPWAY_ROUTER_PORT=… or slots.<slot>.router_port)"
        )
