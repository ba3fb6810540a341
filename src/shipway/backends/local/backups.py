"""Backups of the slot's accessories on this machine, and putting one back
(:class:`~shipway.backends.accessories.AccessoryBackups`).

Postgres: ``pg_dump --format=custom`` of the app's database by the server's own major
version (``/usr/lib/postgresql/<major>/bin/pg_dump``, the major read from the cluster's
``PG_VERSION``); a missing one is refused, never replaced by another major's (dokku's
backups made by a mismatched ``pg_dump`` stopped silently). A restore loads the file into
a new database beside the app's (``<db>.restoring``, in one transaction), and only when it
loaded whole swaps it for the app's (``DROP DATABASE … WITH (FORCE)`` and a rename): a
restore that fails leaves the app's database as it was.

Redis: a ``BGSAVE`` (the server keeps serving while a child writes the snapshot), waited
on until Redis counts it saved, then its ``dump.rdb`` copied. A restore stops the server,
moves its data directory aside, starts it on the snapshot with the append-only file off
(with it on, Redis would load that instead), turns it on again (Redis rewrites the file from
what it loaded), and deletes the directory moved aside only then; on any failure that
directory is put back and the server started on it.

What must never happen: a password on a command line (the tools get it in their
environment, readable by this user only), an accessory's data deleted before what replaces
it answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from shipway.backends import backups as files
from shipway.backends import wire as protocol
from shipway.backends.accessories import PG_USER as USER
from shipway.backends.accessories import Credentials
from shipway.backends.backups import PG_DUMP_WORDS, PG_RESTORE_WORDS, TOOL_LIMIT, wait_until
from shipway.backends.local import servers, wire
from shipway.backends.local.accessories import START_LIMIT, LocalAccessories, program_name
from shipway.backends.local.dirs import SlotDirs, private_dir, write_atomic
from shipway.backends.local.supervisor import state_of
from shipway.backends.protocol import Reporter
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.spec.accessories import Accessory
from shipway.spec.model import Target


class LocalBackups(LocalAccessories):
    """The protocol's AccessoryBackups (:mod:`shipway.backends.accessories`)."""

    def backup_accessory(
        self, target: Target, accessory: Accessory, into: Path, reporter: Reporter
    ) -> tuple[str, str]:
        d = self.dirs(target)
        creds, version = self._answering(d, target, accessory)
        data = self._accessory_dir(d, accessory.name) / "data"
        if accessory.kind == "postgres":
            major = servers.data_version(data) or accessory.version or ""
            return version, pg_dump(major, creds, into, self.environ, reporter)
        files.redis_bgsave(redis_command(creds), redis_persistence(creds), reporter.line)
        copy_private(data / "dump.rdb", into)
        return version, "BGSAVE"

    def restore_accessory(
        self,
        clearance: Clearance,
        target: Target,
        accessory: Accessory,
        source: Path,
        reporter: Reporter,
    ) -> str:
        d = self._guarded(clearance, target)
        creds, version = self._answering(d, target, accessory)
        here = self._accessory_dir(d, accessory.name)
        if accessory.kind == "postgres":
            major = servers.data_version(here / "data") or accessory.version or ""
            pg_restore(major, creds, source, self.environ, reporter)
            return (
                f"restored {source.name} into accessory {accessory.name} (postgres {version}): "
                f"database {creds.database} replaced"
            )
        self._redis_restore(target, accessory, here, creds, source, reporter)
        return (
            f"restored {source.name} into accessory {accessory.name} (redis {version}): "
            "its whole data set replaced"
        )

    def _answering(
        self, d: SlotDirs, target: Target, accessory: Accessory
    ) -> tuple[Credentials, str]:
        """Its credentials and its server's version, when it runs and answers; an InputError
        naming what to do otherwise (nothing touched)."""
        slot = target.slot
        creds = self._accessory_credentials(d, accessory.name)
        info = self.supervisor.info() if creds is not None and self.supervisor.running() else {}
        state = state_of(info.get(program_name(target, accessory.name)))
        if creds is None or state != "RUNNING" or not wire.answers(accessory.kind, creds):
            made = "runs in" if creds is not None else "was never started in"
            raise InputError(
                f"accessory {accessory.name} {made} slot {slot} but does not answer "
                f"({state.lower()}) (hint: shipway deploy {slot} starts it)"
                if creds is not None
                else f"accessory {accessory.name} {made} slot {slot} (hint: shipway deploy "
                f"{slot} creates it)"
            )
        version = wire.server_version(accessory.kind, creds)
        if version is None:
            raise BackendError(
                f"accessory {accessory.name} answers, but its version could not be read "
                "(its login was refused)"
            )
        return creds, version

    def _redis_restore(
        self,
        target: Target,
        accessory: Accessory,
        here: Path,
        creds: Credentials,
        source: Path,
        reporter: Reporter,
    ) -> None:
        data, aside = here / "data", here / "data.before-restore"
        if aside.exists():
            raise InputError(
                f"{aside} is there: an earlier restore was cut short and left the data it "
                "replaced there; nothing was restored (hint: look at it, move it away, and "
                "restore again)"
            )
        name = program_name(target, accessory.name)
        conf = here / "redis.conf"
        reporter.line(f"  stopping accessory {accessory.name} to load the snapshot")
        self.supervisor.stop(name)
        data.rename(aside)
        try:
            private_dir(data)
            shutil.copyfile(source, data / "dump.rdb")
            write_atomic(conf, servers.redis_conf(data, creds, appendonly=False).encode(), 0o600)
            self.supervisor.start(name)
            wait_until(lambda: wire.answers("redis", creds), START_LIMIT, "did not answer")
            files.redis_append_only(redis_command(creds), redis_persistence(creds))
            write_atomic(conf, servers.redis_conf(data, creds).encode(), 0o600)
        except BaseException as exc:
            self.supervisor.stop(name)
            failed = here / f"data.restore-failed.{int(time.time())}"
            if data.exists():
                data.rename(failed)
            aside.rename(data)
            write_atomic(conf, servers.redis_conf(data, creds).encode(), 0o600)
            self.supervisor.start(name)
            if isinstance(exc, Exception):
                raise BackendError(
                    f"the restore failed ({exc}); the data before it is back in place and "
                    f"the server started on it (what was loaded is kept in {failed})"
                ) from exc
            raise
        shutil.rmtree(aside)


# -- Postgres ------------------------------------------------------------------------------


def pg_tool(major: str, tool: str, environ: Mapping[str, str]) -> Path:
    """The server's own major version of a Postgres client tool, or an InputError: another
    major's is never used in its place."""
    path = servers.pg_bin(major, environ) / tool
    if not path.is_file():
        raise InputError(
            f"{path} is missing: the {tool} of postgres {major} (the server's own major "
            f"version) is not installed, and a {tool} of another major version is never "
            f"used in its place; nothing was done (hint: apt-get install "
            f"postgresql-client-{major})"
        )
    return path


def pg_env(creds: Credentials, environ: Mapping[str, str]) -> dict[str, str]:
    """The client tools' environment: the server's address and the password (never a
    command line's), nothing else of the caller's but PATH, HOME and TZ."""
    keep = {k: v for k, v in environ.items() if k in ("PATH", "HOME", "TZ")}
    return keep | {
        "LANG": "C.UTF-8",
        "PGHOST": "127.0.0.1",
        "PGPORT": str(creds.port),
        "PGUSER": USER,
        "PGPASSWORD": creds.password,
        "PGDATABASE": creds.database,
        "PGCONNECT_TIMEOUT": "10",
    }


def pg_dump(
    major: str, creds: Credentials, into: Path, environ: Mapping[str, str], reporter: Reporter
) -> str:
    """The app's database dumped by the server's own major version of ``pg_dump`` (custom
    format: compressed, read back by ``pg_restore``); returns the tool's path."""
    tool = pg_tool(major, "pg_dump", environ)
    words = [str(tool), *PG_DUMP_WORDS, f"--file={into}"]
    fd = os.open(into, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # 0600 before a byte
    os.close(fd)
    tick = files.watch_growth(into, "pg_dump", reporter.line)
    run_tool(words, pg_env(creds, environ), "pg_dump", tick)
    return str(tool)


def pg_restore(
    major: str, creds: Credentials, source: Path, environ: Mapping[str, str], reporter: Reporter
) -> None:
    """``source`` loaded into a new database in one transaction, then swapped for the
    app's; when the load fails, the new one is dropped and the app's is as it was."""
    env = pg_env(creds, environ) | {"PGDATABASE": "postgres"}
    psql = pg_tool(major, "psql", environ)
    tool = pg_tool(major, "pg_restore", environ)

    def sql(statement: str) -> None:
        run_tool([str(psql), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", statement], env, "psql")

    started = time.monotonic()

    def tick() -> None:
        if time.monotonic() - started > files.PROGRESS_EVERY:
            reporter.line(f"  pg_restore: {time.monotonic() - started:.0f}s")

    def load(staging: str) -> None:
        words = [str(tool), *PG_RESTORE_WORDS, f"--dbname={staging}", str(source)]
        run_tool(words, env, "pg_restore", tick)

    files.pg_swap_restore(creds.database, major, sql, load, reporter.line)


def run_tool(
    words: Sequence[str],
    env: Mapping[str, str],
    what: str,
    tick: Callable[[], None] | None = None,
    limit: float = TOOL_LIMIT,
) -> None:
    """Run a client tool to its end (``tick`` called while it runs); a BackendError with
    what it printed when it fails or passes ``limit``."""
    proc = subprocess.Popen(
        list(words),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + limit
    out = b""
    while True:
        try:
            got, _ = proc.communicate(timeout=0.5)
            out += got or b""
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                proc.kill()
                proc.communicate()
                raise BackendError(f"{what} did not finish within {limit:.0f}s") from None
            if tick is not None:
                tick()
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
    if proc.returncode != 0:
        tail = out.decode(errors="replace").strip()[-800:]
        raise BackendError(f"{what} failed (exit {proc.returncode}): {tail}")


# -- Redis ---------------------------------------------------------------------------------


def redis_command(creds: Credentials) -> files.RedisCommand:
    """Its commands after AUTH, each on a connection of its own."""

    def command(*words: bytes) -> bytes:
        with wire.connect(creds, 30.0) as sock:
            try:
                return protocol.redis_command(sock, creds, *words)
            except ValueError as exc:
                raise BackendError(f"the accessory's Redis: {exc}") from exc

    return command


def redis_persistence(creds: Credentials) -> files.RedisInfo:
    def info() -> dict[str, str]:
        with wire.connect(creds, 30.0) as sock:
            try:
                return protocol.redis_info(sock, creds, b"persistence")
            except ValueError as exc:
                raise BackendError(f"the accessory's Redis: {exc}") from exc

    return info


def copy_private(source: Path, into: Path) -> None:
    """``source`` copied to ``into``, made 0600 before a byte is written."""
    fd = os.open(into, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
