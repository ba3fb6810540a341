"""An accessory's backup as a file, on every backend: what it holds (told by its first bytes),
its checksum beside it, and how a restore checks both before anything is touched.

The file is what the server's own tools read back — a Postgres custom-format archive
(``pg_dump -Fc``: it starts ``PGDMP``) or a Redis RDB snapshot (it starts ``REDIS``) — so it
restores without shipway too. Its SHA-256 is written beside it as ``FILE.sha256``, in the
format ``sha256sum -c FILE.sha256`` checks (``<hex>  <name>``); a header inside the file
would have made it unreadable to ``pg_restore`` and ``redis-server``.

What must never happen: a file left under the asked name that is not whole (the backend
writes a partial name, renamed once its checksum is written), a restore from a file whose
checksum is missing or does not match, or from a file of another kind (a Redis snapshot
into Postgres) — each refused before the slot is touched.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shipway.backends.volume_status import human_bytes
from shipway.errors import BackendError, InputError

CHECKSUM_SUFFIX = ".sha256"
#: a file's kind by its first bytes, and the suffix a backup of that kind gets by default
MAGIC = {"postgres": b"PGDMP", "redis": b"REDIS"}
SUFFIX = {"postgres": ".dump", "redis": ".rdb"}
#: how often a long dump or copy says how far it got
PROGRESS_EVERY = 2.0
#: how long a dump, a restore or a snapshot may take
TOOL_LIMIT = 3600.0
LOOK = 0.1
#: how the server's own pg_dump writes a backup (custom format: compressed, read back by
#: pg_restore) and how pg_restore loads one (all or nothing)
PG_DUMP_WORDS = ("--format=custom", "--no-owner", "--no-acl")
PG_RESTORE_WORDS = ("--no-owner", "--no-acl", "--exit-on-error", "--single-transaction")
#: a Redis command after AUTH: its reply (a BackendError when the login is refused)
RedisCommand = Callable[..., bytes]
#: ``INFO persistence`` of a Redis, as a mapping
RedisInfo = Callable[[], dict[str, str]]


@dataclass(frozen=True)
class BackupFile:
    """A backup written whole, with its checksum beside it."""

    accessory: str
    kind: str
    #: the version of the server it was taken from (``15.18``, ``7.0.15``)
    server_version: str
    path: Path
    size_bytes: int
    sha256: str
    seconds: float
    #: the program that made it (``/usr/lib/postgresql/15/bin/pg_dump``, ``BGSAVE``)
    made_by: str

    @property
    def checksum_path(self) -> Path:
        return checksum_path(self.path)

    def line(self) -> str:
        return (
            f"backed up accessory {self.accessory} ({self.kind} {self.server_version}) to "
            f"{self.path}: {human_bytes(self.size_bytes)} in {self.seconds:.1f}s, sha256 "
            f"{self.sha256[:16]}… in {self.checksum_path.name}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "accessory": self.accessory,
            "kind": self.kind,
            "server_version": self.server_version,
            "path": str(self.path),
            "bytes": self.size_bytes,
            "sha256": self.sha256,
            "checksum_file": str(self.checksum_path),
            "seconds": round(self.seconds, 3),
            "made_by": self.made_by,
        }


def checksum_path(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def partial_path(path: Path) -> Path:
    """Where a backup is written until it is whole (then renamed to ``path``)."""
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


def default_name(app: str, slot: str, accessory: str, kind: str) -> str:
    """``<app>-<slot>-<accessory>-<UTC time>.dump`` (``.rdb`` for Redis)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{app}-{slot}-{accessory}-{stamp}{SUFFIX.get(kind, '.backup')}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def kind_of(path: Path) -> str | None:
    """``postgres`` or ``redis`` by the file's first bytes, or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    return next((kind for kind, magic in MAGIC.items() if head.startswith(magic)), None)


def seal(partial: Path, path: Path) -> tuple[str, int]:
    """The partial file's checksum written beside ``path``, then the file renamed into
    place: the asked name holds a whole backup or nothing. Returns (sha256, bytes)."""
    try:
        digest = sha256_of(partial)
        size = partial.stat().st_size
        sidecar = checksum_path(path)
        text = f"{digest}  {path.name}\n"
        fd = os.open(sidecar, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise BackendError(f"could not write the backup {path}: {exc.strerror or exc}") from exc
    return digest, size


def verified(path: Path, kind: str, accessory: str) -> str:
    """The file's sha256 once it matches the one beside it and it is a backup of ``kind``;
    an InputError (exit 2, nothing touched) otherwise."""
    sidecar = checksum_path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such backup file")
    try:
        words = sidecar.read_text().split()
    except OSError:
        raise InputError(
            f"{path}: its checksum file {sidecar.name} is missing beside it, so the file "
            "cannot be checked; nothing was restored (hint: keep the .sha256 that "
            "shipway backup wrote with the file, or make one with: sha256sum FILE > "
            "FILE.sha256 if you trust the file)"
        ) from None
    expected = words[0].lower() if words else ""
    found = sha256_of(path)
    if found != expected:
        raise InputError(
            f"{path}: its sha256 is {found}, and {sidecar.name} says {expected or '(empty)'}: "
            "the file is corrupted or not the one that was backed up; nothing was restored"
        )
    is_kind = kind_of(path)
    if is_kind != kind:
        what = f"a {is_kind} backup" if is_kind else "not a backup shipway can restore"
        raise InputError(
            f"{path}: is {what}, and accessory {accessory} is {kind}; nothing was restored "
            f"(hint: restore it into a {is_kind or kind} accessory)"
        )
    return found


def watch_growth(
    path: Path, what: str, say: Callable[[str], None], every: float = PROGRESS_EVERY
) -> Callable[[], None]:
    """A tick to call while waiting on a program that writes ``path``: every ``every``
    seconds it says how much was written so far (``pg_dump: 12.3 MiB written, 6s``)."""
    started = time.monotonic()
    last = [started]

    def tick() -> None:
        now = time.monotonic()
        if now - last[0] < every:
            return
        last[0] = now
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        say(f"  {what}: {human_bytes(size)} written, {now - started:.0f}s")

    return tick


def wait_until(done: Callable[[], bool], limit: float, what: str) -> None:
    """Until ``done()``; a BackendError saying the accessory ``what`` after ``limit``."""
    until = time.monotonic() + limit
    while not done():
        if time.monotonic() > until:
            raise BackendError(f"the accessory {what} within {limit:.0f}s")
        time.sleep(LOOK)


# -- what every backend does alike, each over its own way of reaching the server ----------


def redis_bgsave(command: RedisCommand, persistence: RedisInfo, say: Callable[[str], None]) -> None:
    """A snapshot taken now: ``BGSAVE``, waited on until Redis counts one more save than
    before it was asked (a save of Redis' own in progress is waited on, then it is asked
    again); a BackendError when the save failed. Redis renames a whole snapshot into place,
    so its ``dump.rdb``, opened after this, is one snapshot whatever saves come after."""
    before = int(persistence().get("rdb_saves", "0"))
    deadline = time.monotonic() + TOOL_LIMIT
    started = said = time.monotonic()
    asked = False
    while True:
        info = persistence()
        if info.get("rdb_bgsave_in_progress") == "0":
            if asked and int(info.get("rdb_saves", "0")) > before:
                break
            asked = asked or command(b"BGSAVE").startswith(b"+")
        if time.monotonic() > deadline:
            raise BackendError(f"BGSAVE did not finish within {TOOL_LIMIT:.0f}s")
        if time.monotonic() - said > PROGRESS_EVERY:
            said = time.monotonic()
            say(f"  BGSAVE: {said - started:.0f}s")
        time.sleep(LOOK)
    if info.get("rdb_last_bgsave_status") != "ok":
        raise BackendError(
            f"BGSAVE failed (rdb_last_bgsave_status: {info.get('rdb_last_bgsave_status')}); "
            "see the accessory's log"
        )


def redis_keys(command: RedisCommand) -> int:
    """How many keys the server holds (``DBSIZE``)."""
    reply = command(b"DBSIZE")
    if not reply.startswith(b":"):
        raise BackendError(f"DBSIZE: {reply.decode(errors='replace').strip()}")
    return int(reply[1:].split(b"\r\n", 1)[0])


def redis_loaded(persistence: RedisInfo) -> None:
    """Until the server has loaded its data (it answers ``INFO`` while it loads, and
    refuses every command on its keys with ``-LOADING``)."""
    wait_until(lambda: persistence().get("loading") == "0", TOOL_LIMIT, "did not load its data")


def redis_append_only(command: RedisCommand, persistence: RedisInfo) -> None:
    """The append-only file on, rewritten from what the server loaded (a server started on
    a snapshot with it off: with it on, Redis would have loaded that file instead)."""
    redis_loaded(persistence)
    reply = command(b"CONFIG", b"SET", b"appendonly", b"yes")
    if not reply.startswith(b"+OK"):
        raise BackendError(f"CONFIG SET appendonly yes: {reply.decode(errors='replace').strip()}")

    def rewritten() -> bool:
        info = persistence()
        return (
            info.get("aof_enabled") == "1"
            and info.get("aof_rewrite_in_progress") == "0"
            and info.get("aof_rewrite_scheduled") == "0"
        )

    wait_until(rewritten, TOOL_LIMIT, "did not rewrite its append-only file")


def pg_swap_restore(
    database: str,
    major: str,
    sql: Callable[[str], None],
    load: Callable[[str], None],
    say: Callable[[str], None],
) -> None:
    """A dump loaded into a new database beside the app's by ``load(name)`` (pg_restore in
    one transaction), then swapped in by ``sql`` (each call one psql in the ``postgres``
    database) with no moment when the app's database name names nothing: new connections to
    the old one are refused (``ALLOW_CONNECTIONS false``), its sessions ended and waited on,
    then the old one renamed aside and the new one renamed in by one transaction (both
    renames or neither), and only then the old one dropped. When the load or the swap fails,
    the new one is dropped and the app's database is as it was, taking connections again."""
    staging, aside = f"{database}.restoring", f"{database}.before-restore"
    # the app's connections are cut (FORCE, Postgres 13 on): they reconnect to the new one
    force = " WITH (FORCE)" if int(major.split(".")[0] or 0) >= 13 else ""
    sql(f'DROP DATABASE IF EXISTS "{staging}"')
    # a restore cut short after its swap left the data it replaced: it was to go
    sql(f'DROP DATABASE IF EXISTS "{aside}"{force}')
    sql(f'CREATE DATABASE "{staging}"')
    say(f"  pg_restore into a new database {staging} (one transaction)")
    try:
        load(staging)
    except BaseException:
        sql(f'DROP DATABASE IF EXISTS "{staging}"')
        raise
    say(f"  swapping {staging} in for {database} (one transaction: both renames or neither)")
    name = database.replace("'", "''")
    try:
        sql(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS false')
        sql(_ENDED.replace("{name}", name))
        sql(
            f'BEGIN; ALTER DATABASE "{database}" RENAME TO "{aside}"; '
            f'ALTER DATABASE "{staging}" RENAME TO "{database}"; COMMIT'
        )
    except BaseException:
        sql(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS true')
        sql(f'DROP DATABASE IF EXISTS "{staging}"')
        raise
    try:
        sql(f'DROP DATABASE IF EXISTS "{aside}"{force}')
    except BackendError as exc:  # the restore is done: what it replaced is left, said
        say(f"  warning: the data it replaced is left in database {aside}: {exc}")


#: the sessions of database {name} ended, and waited on until they are gone (at most 10 s):
#: a rename waits 5 s for them, holding a lock that makes a new connection fail after it
_ENDED = """DO $$ BEGIN
  PERFORM pg_terminate_backend(pid) FROM pg_stat_activity
    WHERE datname = '{name}' AND pid <> pg_backend_pid();
  FOR i IN 1..1000 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity
      WHERE datname = '{name}' AND pid <> pg_backend_pid());
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$"""


def upgrade_dump(root: str, before: str, after: str) -> tuple[str, str, str]:
    """A Postgres major-version upgrade's places in the accessory's volume mounted at
    ``root`` and its first step: (the new cluster's directory ``pg<after>``, the dump
    ``shipway-upgrade-<before>-to-<after>.dump``, the ``sh`` script that writes the dump by
    the old server's ``pg_dump`` under a partial name, renamed when whole, after deleting
    what an earlier upgrade cut short left of both)."""
    new_data = f"{root}/pg{after}"
    dump = f"{root}/shipway-upgrade-{before}-to-{after}.dump"
    words = " ".join(PG_DUMP_WORDS)
    script = (
        f'rm -rf "{new_data}" "{dump}.partial" && umask 077 && '
        f'pg_dump {words} --file="{dump}.partial" && mv "{dump}.partial" "{dump}"'
    )
    return new_data, dump, script


def old_cluster_gone(root: str, keep: str) -> str:
    """The ``sh`` command that deletes from ``root`` all but the new data's directory
    ``keep`` (``pg16``, ``redis8``), shipway's own files (the dump) and ``lost+found``: once
    the new server answers."""
    return (
        f'find {root} -mindepth 1 -maxdepth 1 ! -name "{keep}" ! -name "shipway-*" '
        "! -name lost+found -exec rm -rf {} +"
    )


def pg_major(version_line: str) -> str:
    """The major version a Postgres tool or server says it is (``pg_dump (PostgreSQL)
    15.18 (Debian 15.18-0+deb12u1)``, ``15.18``: ``15``; ``9.6.24``: ``9.6``)."""
    parts = version_word(version_line).split(".")
    return ".".join(parts[:2]) if parts[0] in ("9", "8", "7") else parts[0]


def major(kind: str, version_line: str) -> str:
    """The major version a server of ``kind`` says it is (Postgres as :func:`pg_major`;
    Redis ``8.2.3``: ``8``)."""
    if kind == "postgres":
        return pg_major(version_line)
    return version_word(version_line).split(".")[0]


def new_major(kind: str, version: str, after: str) -> None:
    """A BackendError unless the server an upgrade started (``version``) is major ``after``."""
    if major(kind, version) != after:
        raise BackendError(f"the new server is {kind} {version}, not {after}")


def keys_loaded(had: int, now: int, after: str) -> str:
    """What a Redis upgrade's new server loaded (``its 2 keys loaded from the snapshot``); a
    BackendError when it holds none of the ``had`` keys the old one held."""
    if had and not now:
        raise BackendError(f"redis {after} loaded none of the {had} keys of the snapshot")
    return f"its {now} keys loaded from the snapshot"


def version_word(version_line: str) -> str:
    """The first word of a version line that is a version (``15.18``), or ``""``."""
    words = version_line.replace("(", " ").replace(")", " ").split()
    return next((w for w in words if w[:1].isdigit()), "")


def own_pg_dump(said: str, server: str, where: str) -> str:
    """``pg_dump 15.18`` when the version line a ``pg_dump`` ``said`` is of the server's
    major version; an InputError otherwise (nothing done): another major's is never used."""
    tool, ours = pg_major(said), pg_major(server)
    if tool != ours:
        raise InputError(
            f"{where}: its pg_dump is postgres {tool or '?'} ({said}), and its server is "
            f"postgres {server}: a pg_dump of another major version is never used; nothing "
            "was done (hint: run the server's own image)"
        )
    return f"pg_dump {version_word(said)}"
