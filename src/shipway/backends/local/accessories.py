"""The slot's accessories on this machine: each one a supervised program of its own, beside
the app's and never one of them.

Layout, under the slot's directory::

    accessories/<name>/
      credentials.json   0600: its password, its port (given once, kept), its database
      accessory.json     what was last started: kind, version, declaration (no secret)
      data/              its data (a Postgres cluster, Redis' files): its volume
      redis.conf         0600 (Redis: it holds the password)
      server.log         what the server printed (0600)

What must never happen: an app's deploy, rollback, restart, switch or ``stop`` restarting
one (its program is named ``acc.<app>.<slot>.<name>``, outside every name the app's
programs are found by, and no step but :meth:`start_accessory` touches it); its data
deleted by anything but ``destroy --volumes``; a second password made for it (the file is
linked into place, so of two callers the second reads the first one's); the server on
another address than 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import secrets as _random
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shipway.backends.accessories import AccessoryStatus, Credentials, link_name
from shipway.backends.local import servers, wire
from shipway.backends.local.dirs import (
    SlotDirs,
    private_dir,
    private_log,
    read_json,
    write_atomic,
    write_json,
)
from shipway.backends.local.state import LocalState
from shipway.backends.local.supervisor import program_conf, state_of
from shipway.backends.local.volumes import disk_usage
from shipway.backends.protocol import Failure, Leftover, Reason, Reporter
from shipway.errors import BackendError
from shipway.guard import Clearance
from shipway.plan.model import StartAccessory
from shipway.spec.accessories import Accessory, from_json
from shipway.spec.model import App, Slot, Target
from shipway.spec.secrets import Secret

#: how long a started accessory may take to answer (within the deploy's own deadline)
START_LIMIT = 120.0
LOOK = 0.1


def program_name(target: Target, name: str) -> str:
    return f"acc.{target.app}.{target.slot}.{name}"


def accessory_conf(name: str, command: list[str], here: Path, stopsignal: str) -> str:
    """The supervised program of an accessory whose directory is ``here``."""
    log = here / "server.log"
    return program_conf(
        name, command, here, log, startsecs=1, stopwaitsecs=30, stopsignal=stopsignal
    )


def data_version(here: Path, kind: str) -> str | None:
    """The major version the data of the accessory whose directory is ``here`` belongs to:
    a Postgres cluster's ``PG_VERSION``; Redis' files say none, so the version it was last
    started as (``accessory.json``)."""
    if kind == "postgres":
        return servers.data_version(here / "data")
    meta = read_json(here / "accessory.json", None)
    found = meta.get("version") if isinstance(meta, dict) else None
    return str(found) if found else None


class LocalAccessories(LocalState):
    """The protocol's Accessories (:mod:`shipway.backends.accessories`)."""

    def _accessory_dir(self, d: SlotDirs, name: str) -> Path:
        return d.base / "accessories" / name

    def _accessory_names(self, d: SlotDirs) -> list[str]:
        try:
            return sorted(p.name for p in (d.base / "accessories").iterdir() if p.is_dir())
        except OSError:
            return []

    # -- reads -------------------------------------------------------------------------

    def accessory_problems(self, app: App, slot: Slot) -> list[str]:
        found = (
            servers.problem(a, self.environ, app.spec_file.name) for a in app.accessories.values()
        )
        return [p for p in found if p is not None]

    def _accessory_credentials(self, d: SlotDirs, name: str) -> Credentials | None:
        doc = read_json(self._accessory_dir(d, name) / "credentials.json", None)
        if not isinstance(doc, dict):
            return None
        try:
            return Credentials.from_json(doc)
        except (KeyError, ValueError) as exc:
            raise BackendError(f"the credentials of accessory {name} are unreadable") from exc

    def accessories(self, target: Target) -> list[AccessoryStatus]:
        d = self.dirs(target)
        names = self._accessory_names(d)
        if not names:  # a slot without accessories costs no call to supervisord
            return []
        info = self.supervisor.info()
        out = []
        for name in names:
            here = self._accessory_dir(d, name)
            meta = read_json(here / "accessory.json", None)
            if not isinstance(meta, dict):
                continue  # credentials made, never started: a deploy creates it
            out.append(
                self._accessory_status(
                    d, name, meta, state_of(info.get(program_name(target, name)))
                )
            )
        return out

    def _accessory_status(
        self, d: SlotDirs, name: str, meta: Mapping[str, Any], state: str
    ) -> AccessoryStatus:
        kind = str(meta.get("kind", "custom"))
        data = self._accessory_dir(d, name) / "data"
        creds = self._accessory_credentials(d, name)
        healthy = creds is not None and state == "RUNNING" and wire.answers(kind, creds)
        version = servers.data_version(data) if kind == "postgres" else None
        real = wire.server_version(kind, creds) if healthy and creds is not None else None
        shown = (
            "running"
            if healthy
            else "starting"
            if state in ("STARTING", "RUNNING", "BACKOFF")
            else "down"
        )
        return AccessoryStatus(
            name=name,
            kind=kind,
            version=version or meta.get("version"),
            server_version=real,
            state=shown,
            healthy=healthy,
            digest=meta.get("digest"),
            declared=meta.get("declared") or {},
            address=f"127.0.0.1:{creds.port}" if creds else None,
            data_path=str(data),
            data_bytes=disk_usage(data) if data.is_dir() else None,
        )

    def accessory_links(
        self, target: Target, declared: Mapping[str, Accessory], clearance: Clearance | None
    ) -> dict[str, Secret]:
        d = self._guarded(clearance, target) if clearance is not None else self.dirs(target)
        out: dict[str, Secret] = {}
        for name, accessory in declared.items():
            if accessory.kind == "custom":
                continue
            creds = self._accessory_credentials(d, name)
            if creds is None and clearance is not None:
                creds = self._make_credentials(d, target, name)
            if creds is not None:
                out[name] = Secret(creds.link(accessory.kind))
                out[link_name(name)] = Secret(creds.password)
        return out

    # -- mutations ---------------------------------------------------------------------

    def _make_credentials(self, d: SlotDirs, target: Target, name: str) -> Credentials:
        """A random password and a port of its own, once: linked into place, so of two
        callers the second reads (and keeps) the first one's."""
        here = private_dir(self._accessory_dir(d, name))
        port = self.ports.allocate(1, program_name(target, name))[0]
        creds = Credentials(_random.token_urlsafe(24), port, target.app)
        final = here / "credentials.json"
        partial = here / f".credentials.{os.getpid()}.json"
        write_json(partial, creds.to_json(), 0o600)
        try:
            os.link(partial, final)
        except FileExistsError:
            self.ports.release([port])
            made = self._accessory_credentials(d, name)
            assert made is not None
            return made
        finally:
            partial.unlink(missing_ok=True)
        return creds

    def start_accessory(
        self,
        clearance: Clearance,
        target: Target,
        step: StartAccessory,
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        d = self._guarded(clearance, target)
        accessory = from_json(step.accessory, json.loads(step.declaration))
        creds = self._accessory_credentials(d, accessory.name) or self._make_credentials(
            d, target, accessory.name
        )
        here = self._accessory_dir(d, accessory.name)
        log = here / "server.log"
        private_log(log)
        name = program_name(target, accessory.name)
        self.supervisor.ensure()
        found = data_version(here, accessory.kind)
        if step.action == "upgrade" and found not in (None, accessory.version):
            from shipway.backends.local.upgrades import upgrade  # it builds on backups

            failure = upgrade(self, target, accessory, creds, here, deadline, reporter)
            if failure is not None:
                return failure  # the old server runs on its data; nothing recorded
        command, stopsignal = self._accessory_server(accessory, here, creds, log, reporter)
        state = state_of(self.supervisor.info().get(name))
        conf = accessory_conf(name, command, here, stopsignal)
        if step.action in ("start", "upgrade") and state in ("RUNNING", "STARTING"):
            pass  # up already (or upgraded just now): only waited on
        elif step.action == "start" and state != "ABSENT":
            self.supervisor.start(name)
        else:  # created, declared anew, or unknown to supervisord: (re)placed
            self.supervisor.add(name, conf)
        meta = {
            "kind": accessory.kind,
            "version": accessory.version,
            "digest": accessory.digest(),
            "declared": accessory.to_json(),
        }
        write_json(here / "accessory.json", meta)
        return self._accessory_gate(accessory, creds, name, log, deadline, reporter)

    def _accessory_server(
        self, accessory: Accessory, here: Path, creds: Credentials, log: Path, reporter: Reporter
    ) -> tuple[list[str], str]:
        """The server's command and stop signal; its data made first, once."""
        data = here / "data"
        version = accessory.version or ""
        if accessory.kind == "postgres":
            found = servers.data_version(data)
            if found is None and data.exists() and any(data.iterdir()):
                raise BackendError(f"{data} holds data that is not a Postgres cluster")
            if found is None:
                reporter.line(f"  accessory {accessory.name}: initdb (postgres {version})")
                servers.initdb(version, data, creds, self.environ, log)
            elif found != version:
                raise BackendError(
                    f"{data} holds postgres {found} data, and postgres {version} cannot run it "
                    f"(a major-version change is a dump and restore: deploy with "
                    f"--upgrade-accessory {accessory.name})"
                )
            # INT: Postgres' fast shutdown (TERM would wait for every client to leave)
            return servers.pg_command(version, data, creds.port, self.environ), "INT"
        binary = servers.redis_binary(self.environ, version)
        if binary is None:
            raise BackendError("redis-server is not installed (hint: apt-get install redis-server)")
        found = servers.redis_version(binary)
        if found != version:
            raise BackendError(
                f"{binary} is redis {found}, and accessory {accessory.name} declares "
                f'version = "{version}" (hint: install redis {version}, or declare "{found}")'
            )
        private_dir(data)
        conf = here / "redis.conf"
        write_atomic(conf, servers.redis_conf(data, creds).encode(), 0o600)
        return [binary, str(conf)], "TERM"

    def _accessory_gate(
        self,
        accessory: Accessory,
        creds: Credentials,
        name: str,
        log: Path,
        deadline: float,
        reporter: Reporter,
        first_exit_fails: bool = False,
    ) -> Failure | None:
        """Until the server answers in its own protocol, or it failed, or time is up.
        ``first_exit_fails``: a server that exits once has failed (a new major's, in an
        upgrade, whose old server waits), not only one supervisord gave up on."""
        until = min(deadline, time.monotonic() + START_LIMIT)
        failed = {"FATAL", "EXITED", "STOPPED"} | ({"BACKOFF"} if first_exit_fails else set())
        while True:
            state = state_of(self.supervisor.info().get(name))
            if state == "RUNNING" and wire.answers(accessory.kind, creds):
                reporter.line(
                    f"  accessory {accessory.describe()} answers on 127.0.0.1:{creds.port}"
                )
                return None
            if state in failed or time.monotonic() > until:
                tail = log.read_text(errors="replace").splitlines()[-12:] if log.exists() else []
                why = "did not start" if state in failed else "did not answer in time"
                return Failure(
                    reason=Reason.STEP_FAILED,
                    message=f"accessory {accessory.describe()} {why} ({state.lower()})",
                    details=tuple(tail),
                )
            time.sleep(LOOK)

    # -- destroy -----------------------------------------------------------------------

    def _accessory_leftovers(self, d: SlotDirs) -> list[Leftover]:
        out = []
        for name in self._accessory_names(d):
            data = self._accessory_dir(d, name) / "data"
            size = disk_usage(data) if data.is_dir() else 0
            out.append(Leftover("accessory", f"{name} (its program)"))
            out.append(Leftover("accessory data", f"{name} ({data}, {size} bytes)", data=True))
        return out

    def _destroy_accessories(
        self, d: SlotDirs, target: Target, volumes: bool, reporter: Reporter
    ) -> None:
        """Stop each accessory; with ``volumes``, delete its data, credentials and port."""
        for name in self._accessory_names(d):
            self.supervisor.remove(program_name(target, name))
            reporter.line(f"  stopped accessory {name}")
            if not volumes:
                continue
            creds = self._accessory_credentials(d, name)
            shutil.rmtree(self._accessory_dir(d, name))
            if creds is not None:
                self.ports.release([creds.port])
            reporter.line(f"  deleted accessory {name}'s data and credentials")
        if volumes:
            parent = d.base / "accessories"
            if parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()
        others = [n for n in self.supervisor.names() if not n.startswith("sw-router-")]
        if not others and self.supervisor.running():
            self.supervisor.shutdown()
