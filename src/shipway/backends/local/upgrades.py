"""An accessory moved to another major version, asked for (``--upgrade-accessory``): the data
carried over by the servers' own means, never an in-place start of the new server on the
old data.

In order: every program both versions need is looked for first (nothing is touched when
one is missing); the old server, which must answer, writes its data out, and that copy is
kept beside the data with its checksum (``shipway restore`` reads it back) — Postgres: a
``pg_dump`` by its own major (``upgrade-<old>-to-<new>.dump``); Redis: a ``BGSAVE``, the
snapshot a backup takes (``upgrade-<old>-to-<new>.rdb``); the old server is stopped and its
data directory renamed ``data.<old>`` (kept); the new data directory made — a new cluster by
the new version's ``initdb`` with the same credentials, or (Redis) a directory holding a
copy of the snapshot; the new server started and waited on until it answers, its version
checked to be the new major; then the data loaded by the new ``pg_restore`` (Redis loaded
the snapshot as it started, with the append-only file off: its keys are counted, none
missing when the old one had some, and the append-only file turned on, rewritten from what
it loaded). Only then is ``data.<old>`` deleted. When any of it fails, the new data
directory is moved aside (``data.<new>.failed.<time>``), ``data.<old>`` put back and the
old server started on it: the data is never lost.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from shipway.backends import backups as files
from shipway.backends.accessories import Credentials
from shipway.backends.local import servers, wire
from shipway.backends.local.accessories import (
    LocalAccessories,
    accessory_conf,
    data_version,
    program_name,
)
from shipway.backends.local.backups import (
    copy_private,
    pg_dump,
    pg_restore,
    pg_tool,
    redis_command,
    redis_persistence,
)
from shipway.backends.local.dirs import private_dir, write_atomic
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError
from shipway.spec.accessories import Accessory
from shipway.spec.model import Target


class _Postgres:
    """How a Postgres cluster moves: ``pg_dump``, ``initdb``, ``pg_restore``."""

    kind, copy, noun, suffix = "postgres", "pg_dump", "dump", ".dump"

    def __init__(self, local: LocalAccessories, creds: Credentials, here: Path) -> None:
        self.local, self.creds, self.here = local, creds, here

    def tools(self, old: str, new: str) -> None:
        pg_tool(old, "pg_dump", self.local.environ)
        for tool in ("initdb", "postgres", "pg_restore", "psql"):
            pg_tool(new, tool, self.local.environ)

    def write_out(self, old: str, into: Path, reporter: Reporter) -> None:
        pg_dump(old, self.creds, into, self.local.environ, reporter)

    def make(self, new: str, copy: Path, reporter: Reporter) -> None:
        data = self.here / "data"
        reporter.line(f"  accessory {self.here.name}: initdb (postgres {new})")
        servers.initdb(new, data, self.creds, self.local.environ, self.here / "server.log")
        made = servers.data_version(data)
        if made != new:
            raise BackendError(f"the initdb of postgres {new} made a cluster of version {made}")

    def conf(self, name: str, version: str, loading: bool = False) -> str:
        command = servers.pg_command(
            version, self.here / "data", self.creds.port, self.local.environ
        )
        return accessory_conf(name, command, self.here, "INT")  # INT: Postgres' fast shutdown

    def load(self, new: str, copy: Path, reporter: Reporter) -> str:
        pg_restore(new, self.creds, copy, self.local.environ, reporter)
        return "the data restored"


class _Redis:
    """How a Redis data set moves: ``BGSAVE``, the snapshot copied into a new directory, the
    new server started on it with the append-only file off, then on."""

    kind, copy, noun, suffix = "redis", "BGSAVE", "snapshot", ".rdb"

    def __init__(self, local: LocalAccessories, creds: Credentials, here: Path) -> None:
        self.local, self.creds, self.here = local, creds, here
        self.keys = 0

    def _binary(self, version: str) -> str:
        binary = servers.redis_binary(self.local.environ, version)
        found = servers.redis_version(binary) if binary is not None else None
        if binary is None or found != version:
            where = f"{binary} is redis {found}" if binary else "no redis-server was found"
            raise BackendError(
                f"redis {version} is not installed on this machine ({where}); nothing was "
                f"done (hint: lay it out as ${servers.REDIS_ROOT_VARIABLE}/{version}/bin/"
                "redis-server)"
            )
        return binary

    def tools(self, old: str, new: str) -> None:
        self._binary(old)
        self._binary(new)

    def write_out(self, old: str, into: Path, reporter: Reporter) -> None:
        files.redis_bgsave(redis_command(self.creds), redis_persistence(self.creds), reporter.line)
        copy_private(self.here / "data" / "dump.rdb", into)
        self.keys = files.redis_keys(redis_command(self.creds))

    def make(self, new: str, copy: Path, reporter: Reporter) -> None:
        data = private_dir(self.here / "data")
        shutil.copyfile(copy, data / "dump.rdb")
        self._write_conf(appendonly=False)

    def _write_conf(self, appendonly: bool) -> None:
        text = servers.redis_conf(self.here / "data", self.creds, appendonly)
        write_atomic(self.here / "redis.conf", text.encode(), 0o600)

    def conf(self, name: str, version: str, loading: bool = False) -> str:
        if not loading:  # put back: its own append-only file is what it loads
            self._write_conf(appendonly=True)
        command = [self._binary(version), str(self.here / "redis.conf")]
        return accessory_conf(name, command, self.here, "TERM")

    def load(self, new: str, copy: Path, reporter: Reporter) -> str:
        files.redis_loaded(redis_persistence(self.creds))
        keys = files.redis_keys(redis_command(self.creds))
        loaded = files.keys_loaded(self.keys, keys, new)
        files.redis_append_only(redis_command(self.creds), redis_persistence(self.creds))
        self._write_conf(appendonly=True)
        return loaded


def upgrade(
    local: LocalAccessories,
    target: Target,
    accessory: Accessory,
    creds: Credentials,
    here: Path,
    deadline: float,
    reporter: Reporter,
) -> Failure | None:
    """The accessory's data at ``here/data`` moved to ``accessory.version``; its failure
    (the old server running again on its data), or None (the new one answers)."""
    kind = accessory.kind
    way: _Postgres | _Redis = (_Redis if kind == "redis" else _Postgres)(local, creds, here)
    data, log = here / "data", here / "server.log"
    old, new = data_version(here, kind) or "", accessory.version or ""
    way.tools(old, new)
    kept = here / f"data.{old}"
    if kept.exists():
        raise BackendError(
            f"{kept} is there: an earlier upgrade was cut short and left the {kind} {old} "
            "data there; nothing was done (hint: look at it, move it away, deploy again)"
        )
    name = program_name(target, accessory.name)
    if not wire.answers(kind, creds):
        raise BackendError(
            f"accessory {accessory.name} ({kind} {old}) does not answer, and its data is "
            "written out by it: nothing was done (hint: deploy without the version change "
            "first, so that it runs)"
        )
    copy = here / f"upgrade-{old}-to-{new}{way.suffix}"
    partial = files.partial_path(copy)
    reporter.line(f"  accessory {accessory.name}: {way.copy} of {kind} {old} to {copy}")
    try:
        way.write_out(old, partial, reporter)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    files.seal(partial, copy)
    reporter.line(f"  accessory {accessory.name}: stopping {kind} {old}; its data kept in {kept}")
    local.supervisor.stop(name)
    data.rename(kept)
    try:
        way.make(new, copy, reporter)
        local.supervisor.add(name, way.conf(name, new, loading=True))
        failure = local._accessory_gate(accessory, creds, name, log, deadline, reporter, True)
        if failure is not None:
            raise BackendError(" ".join([failure.message, *failure.details[-3:]]))
        files.new_major(kind, wire.server_version(kind, creds) or "?", new)
        loaded = way.load(new, copy, reporter)
    except BaseException as exc:
        failed = _put_back(local, way, name, old, new)
        if not isinstance(exc, Exception):
            raise
        back = Accessory(accessory.name, accessory.kind, old)
        again = local._accessory_gate(back, creds, name, log, deadline, reporter)
        running = "runs again on its data" if again is None else "was put back but does not answer"
        return Failure(
            reason=Reason.STEP_FAILED,
            message=(
                f"the upgrade of accessory {accessory.name} to {kind} {new} failed: {exc}; "
                f"{kind} {old} {running} (kept whole; the new data is in {failed}, "
                f"the {way.noun} in {copy})"
            ),
        )
    shutil.rmtree(kept)
    reporter.line(
        f"  accessory {accessory.name}: {kind} {new} answers with {loaded}; "
        f"{kept.name} deleted, the {way.noun} kept in {copy.name}"
    )
    return None


def _put_back(
    local: LocalAccessories, way: _Postgres | _Redis, name: str, old: str, new: str
) -> Path:
    """The new data directory moved aside, the old one put back and its server started."""
    here = way.here
    data, kept = here / "data", here / f"data.{old}"
    local.supervisor.stop(name)
    failed = here / f"data.{new}.failed.{int(time.time())}"
    if data.exists():
        data.rename(failed)
    kept.rename(data)
    local.supervisor.add(name, way.conf(name, old))
    return failed
