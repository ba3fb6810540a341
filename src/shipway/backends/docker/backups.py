"""Backups of the slot's accessories on its Docker hosts, and putting one back
(:class:`~shipway.backends.accessories.AccessoryBackups`), through the Engine API alone.

Postgres: the server's own ``pg_dump`` — the one in the accessory's own image, so its major
version is the server's (checked: a ``pg_dump`` that says another major is refused) — run
in the accessory's container (an exec, the password in its environment, never on a command
line), its output streamed into the local file as it comes. A restore copies the file into
the container (``put_archive``, streamed), loads it into a new database beside the app's in
one transaction and swaps it in (:func:`~shipway.backends.backups.pg_swap_restore`), as the
local backend does: a load that fails leaves the app's database as it was.

Redis: a ``BGSAVE`` asked over the slot's network, waited on until Redis counts it saved,
then its ``/data/dump.rdb`` fetched with ``get_archive``. A restore never starts the
accessory's own server on data it has not seen load: a helper container of the same image
(on the same volume, the slot's network, no published port) starts a server on the snapshot
in ``/data/shipway-restore`` with the append-only file off, turns it on (Redis rewrites it
from what it loaded) and stops; only then is the accessory stopped, its data moved aside
into ``/data/shipway-before-restore`` and the prepared data moved in (renames in one
volume), and the accessory started. The data moved aside is deleted once the accessory
answers; when it does not, it is put back and the accessory started on it.

What must never happen: the accessory's data deleted before what replaces it answers; a
file under the asked name that is not whole (the engine seals it); a helper container left
behind (removed on every path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import secrets as _random
import shutil
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TypeVar

import docker
import docker.errors
import docker.types
from docker.models.containers import Container
from docker.utils.socket import STDERR, STDOUT

from shipway.backends import backups as files
from shipway.backends import wire
from shipway.backends.accessories import PG_USER, SERVER_PORTS, Credentials
from shipway.backends.docker import container_logs, labels
from shipway.backends.docker.accessories import (
    DATA_DIRS,
    START_LIMIT,
    STOP_TIMEOUT,
    DockerAccessories,
    data_dir,
)
from shipway.backends.docker.connection import HostConnection, Stream
from shipway.backends.docker.containers import ContainerSpec, create
from shipway.backends.docker.edge import edge
from shipway.backends.docker.execs import exec_frames, exit_code
from shipway.backends.protocol import Reporter
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.spec.accessories import Accessory
from shipway.spec.model import Target

T = TypeVar("T")
#: in a Redis accessory's volume, during a restore: the prepared data, and what it replaced
PREPARED = "shipway-restore"
ASIDE = "shipway-before-restore"
#: the server that loads a snapshot in the directory that follows (its password last)
LOADER = ("redis-server", "--appendonly", "no", "--dir")
#: the kind of the helper containers of a restore (removed on every path)
HELPER = "accessory-restore"
#: moves every entry of a directory but shipway's own (``shipway-*``) into another
_MOVE = r"""
set -eu
cd "$0"
move() {
  for f in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    case "${f##*/}" in shipway-*) continue ;; esac
    mv "$f" "$2"/
  done
}
"""
#: the prepared data in, what it replaces aside
SWAP = _MOVE + f"mkdir {ASIDE}\nmove . {ASIDE}\nmove {PREPARED} .\nrmdir {PREPARED}\n"
#: what was aside put back (what was moved in kept in shipway-restore-failed.<time>, $1)
PUT_BACK = _MOVE + (
    f'[ -d {ASIDE} ] || exit 0\nmkdir "shipway-restore-failed.$1"\n'
    f'move . "shipway-restore-failed.$1"\nmove {ASIDE} .\nrmdir {ASIDE}\n'
)


class DockerBackups(DockerAccessories):
    """The protocol's AccessoryBackups (:mod:`shipway.backends.accessories`)."""

    def backup_accessory(
        self, target: Target, accessory: Accessory, into: Path, reporter: Reporter
    ) -> tuple[str, str]:
        self._serves(target)
        conn, c, creds, version = self._answering(accessory)
        where = f"container {c.name} on {conn.name}"
        with edge(f"host {conn.name}: backup of accessory {accessory.name}"):
            if accessory.kind == "postgres":
                tool = self._pg_dump_of(c, version)
                fd = os.open(into, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    tick = files.watch_growth(into, "pg_dump", reporter.line)
                    words = ["pg_dump", *files.PG_DUMP_WORDS]
                    _exec(c, words, _pg_env(creds), "pg_dump", out, tick)
                return version, f"{tool} in {where}"
            command, persistence = self._redis(conn, c, creds)
            files.redis_bgsave(command, persistence, reporter.line)
            _fetch(c, f"{data_dir(c, 'redis')}/dump.rdb", into)
            return version, f"BGSAVE in {where}"

    def restore_accessory(
        self,
        clearance: Clearance,
        target: Target,
        accessory: Accessory,
        source: Path,
        reporter: Reporter,
    ) -> str:
        self._guard(clearance, target)
        conn, c, creds, version = self._answering(accessory)
        with edge(f"host {conn.name}: restore of accessory {accessory.name}"):
            if accessory.kind == "postgres":
                self._pg_restore(c, creds, version, source, reporter)
                self._note(conn.name, f"restored accessory {accessory.name}'s database")
                return (
                    f"restored {source.name} into accessory {accessory.name} (postgres "
                    f"{version}, on {conn.name}): database {creds.database} replaced"
                )
            self._redis_restore(conn, c, accessory, creds, source, reporter)
            self._note(conn.name, f"restored accessory {accessory.name}'s data")
            return (
                f"restored {source.name} into accessory {accessory.name} (redis {version}, "
                f"on {conn.name}): its whole data set replaced"
            )

    # -- what runs -----------------------------------------------------------------------

    def _answering(
        self, accessory: Accessory
    ) -> tuple[HostConnection, Container, Credentials, str]:
        """Its host, container, credentials and server version, when it runs and answers;
        an InputError naming what to do otherwise (nothing touched)."""
        host = self._accessory_host(accessory)
        conn = self._conn(host.name)
        slot = self.slot.name
        name = labels.accessory(self.app.name, slot, accessory.name)
        with edge(f"host {host.name}: accessory {accessory.name}"):
            client = conn.client()
            c = self._get(client, name)
            creds = self._made_credentials(client, host, accessory, False)
            if c is None or creds is None:
                raise InputError(
                    f"accessory {accessory.name} was never started in slot {slot} (hint: "
                    f"shipway deploy {slot} creates it)"
                )
            if c.status != "running" or not self._answers(conn, c, accessory.kind, creds):
                raise InputError(
                    f"accessory {accessory.name} runs in slot {slot} on {host.name} but does not "
                    f"answer ({c.status}) (hint: shipway deploy {slot} starts it)"
                )
            version = self._version(conn, c, accessory.kind, creds)
        return conn, c, creds, version

    def _version(self, conn: HostConnection, c: Container, kind: str, creds: Credentials) -> str:
        try:
            stream = self._dial(conn, c, kind, 10.0)
            try:
                found = wire.version_over(kind, stream, creds)
            finally:
                stream.close()
        except OSError as exc:
            raise BackendError(f"container {c.name}: its server's version: {exc}") from exc
        if found is None:
            raise BackendError(
                f"container {c.name} answers, but its version could not be read (its login "
                "was refused)"
            )
        return found

    # -- Postgres ------------------------------------------------------------------------

    @staticmethod
    def _pg_dump_of(c: Container, server: str) -> str:
        """The image's ``pg_dump`` (``pg_dump 15.18``), once it is the server's major."""
        said = _exec(c, ["pg_dump", "--version"], {}, "pg_dump --version").decode().strip()
        return files.own_pg_dump(said, server, f"container {c.name}")

    def _pg_restore(
        self, c: Container, creds: Credentials, version: str, source: Path, reporter: Reporter
    ) -> None:
        name = f"shipway-restore-{_random.token_hex(4)}.dump"
        path = f"/tmp/{name}"
        reporter.line(f"  copying {source.name} into container {c.name}")
        if not c.put_archive("/tmp", TarOf(source, name, 0o600)):
            raise BackendError(f"container {c.name}: the backup could not be copied into /tmp")
        try:
            self._pg_load(c, creds, version, path, reporter)
        finally:
            with contextlib.suppress(BackendError, docker.errors.APIError):
                _exec(c, ["rm", "-f", path], {}, "rm")

    @staticmethod
    def _pg_load(
        c: Container, creds: Credentials, version: str, path: str, reporter: Reporter
    ) -> None:
        """The dump at ``path`` in the container made the app's database (loaded beside
        it and swapped in: :func:`~shipway.backends.backups.pg_swap_restore`)."""
        env = _pg_env(creds) | {"PGDATABASE": "postgres"}
        started = time.monotonic()

        def tick() -> None:
            if time.monotonic() - started > files.PROGRESS_EVERY:
                reporter.line(f"  pg_restore: {time.monotonic() - started:.0f}s")

        def sql(statement: str) -> None:
            _exec(c, ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", statement], env, "psql")

        def load(staging: str) -> None:
            words = ["pg_restore", *files.PG_RESTORE_WORDS, f"--dbname={staging}", path]
            _exec(c, words, env, "pg_restore", tick=tick)

        files.pg_swap_restore(creds.database, files.pg_major(version), sql, load, reporter.line)

    # -- Redis ---------------------------------------------------------------------------

    def _redis(
        self, conn: HostConnection, c: Container, creds: Credentials
    ) -> tuple[files.RedisCommand, files.RedisInfo]:
        """Its commands after AUTH and its ``INFO persistence``, each on a connection of
        its own over the slot's network."""

        def over(use: Callable[[Stream], T]) -> T:
            try:
                stream = self._dial(conn, c, "redis", 30.0)
            except OSError as exc:
                raise BackendError(f"container {c.name}: {exc}") from exc
            try:
                return use(stream)
            except (OSError, ValueError) as exc:
                raise BackendError(f"container {c.name}: {exc}") from exc
            finally:
                stream.close()

        def ask(*words: bytes) -> bytes:
            return over(lambda s: wire.redis_command(s, creds, *words))

        def persistence() -> dict[str, str]:
            return over(lambda s: wire.redis_info(s, creds, b"persistence"))

        return ask, persistence

    def _redis_restore(
        self,
        conn: HostConnection,
        c: Container,
        accessory: Accessory,
        creds: Credentials,
        source: Path,
        reporter: Reporter,
    ) -> None:
        here = data_dir(c, "redis")  # the volume's root, or an upgrade's redis<N>
        there = _exec(c, ["ls", "-A", here], {}, "ls").decode().split()
        if ASIDE in there:
            raise InputError(
                f"{here}/{ASIDE} is in accessory {accessory.name}'s volume on {conn.name}: an "
                "earlier restore was cut short and left the data it replaced there; nothing "
                "was restored (hint: look at it, move it away, and restore again)"
            )
        if PREPARED in there:  # an earlier restore's, never swapped in: not the app's data
            _exec(c, ["rm", "-rf", f"{here}/{PREPARED}"], {}, "rm")
        reporter.line(f"  loading {source.name} in a helper container of {c.name}'s image")
        try:
            self._prepare(conn, c, creds, f"{here}/{PREPARED}", source)
        except BaseException:
            with contextlib.suppress(BackendError, docker.errors.APIError):
                _exec(c, ["rm", "-rf", f"{here}/{PREPARED}"], {}, "rm")
            raise
        reporter.line(f"  stopping accessory {accessory.name} to swap the data in")
        c.stop(timeout=STOP_TIMEOUT)
        try:
            self._helper(c, ["sh", "-c", SWAP, here], "swap")
            c.start()
            c.reload()
            files.wait_until(
                lambda: _reloaded(c) and self._answers(conn, c, "redis", creds),
                START_LIMIT,
                "did not answer on the restored data",
            )
        except BaseException as exc:
            stamp = str(int(time.time()))
            with contextlib.suppress(docker.errors.APIError):
                c.stop(timeout=STOP_TIMEOUT)
            self._helper(c, ["sh", "-c", PUT_BACK, here, stamp], "put back")
            c.start()
            if isinstance(exc, Exception):
                raise BackendError(
                    f"the restore failed ({exc}); the data before it is back in place and the "
                    f"accessory started on it (what was loaded is kept in "
                    f"{here}/shipway-restore-failed.{stamp} in its volume)"
                ) from exc
            raise
        _exec(c, ["rm", "-rf", f"{here}/{ASIDE}"], {}, "rm")

    def _prepare(
        self,
        conn: HostConnection,
        c: Container,
        creds: Credentials,
        into: str,
        source: Path | None = None,
        image: str | None = None,
    ) -> None:
        """The snapshot loaded by a server of ``image`` (the accessory's own by default) in
        ``into`` (a directory of its volume), its append-only file rewritten from it, and
        that server stopped: the data a server started with the append-only file on loads.
        ``source``: a local file copied there first (else ``into/dump.rdb`` is there)."""
        image = image or str((c.attrs.get("Config") or {}).get("Image") or c.attrs["Image"])
        helper = dataclasses.replace(
            self._helper_spec(c, image, "load"),
            command=[*LOADER, into, "--requirepass", creds.password],
            network=labels.network(self.app.name, self.slot.name),
        )
        client = c.client
        assert client is not None
        h = create(client, helper)
        try:
            root = DATA_DIRS["redis"]
            rel = into.removeprefix(f"{root}/")
            tar = TarOf(source, f"{rel}/dump.rdb", 0o600, dirs=_parents(rel)) if source else None
            if tar is not None and not h.put_archive(root, tar):
                raise BackendError("the snapshot could not be copied into the accessory's volume")
            h.start()
            h.reload()

            def up() -> bool:
                h.reload()
                if h.status in ("exited", "dead"):
                    tail = container_logs.text(h, 8).replace(creds.password, "***")
                    raise BackendError(f"redis-server did not load the snapshot: {tail}")
                return self._answers(conn, h, "redis", creds)

            files.wait_until(up, START_LIMIT, "did not load the snapshot")
            command, persistence = self._redis(conn, h, creds)
            files.redis_append_only(command, persistence)
            h.stop(timeout=STOP_TIMEOUT)
            h.reload()
            code = (h.attrs.get("State") or {}).get("ExitCode")
            if code != 0:
                raise BackendError(f"the server that loaded the snapshot stopped with exit {code}")
        finally:
            _gone(h)

    def _helper_spec(self, c: Container, image: str, what: str) -> ContainerSpec:
        volume = labels.accessory_volume(
            self.app.name, self.slot.name, str(c.labels.get(labels.ACCESSORY_NAME))
        )
        return ContainerSpec(
            image=image,
            name=f"{c.name}-{what.replace(' ', '-')}-{_random.token_hex(3)}",
            labels={
                **labels.base(self.app.name, self.slot.name, HELPER),
                labels.ACCESSORY_NAME: str(c.labels.get(labels.ACCESSORY_NAME)),
            },
            network="none",
            mounts=[docker.types.Mount(target=DATA_DIRS["redis"], source=volume, type="volume")],
        )

    def _helper(self, c: Container, command: Sequence[str], what: str) -> None:
        """A shell of the accessory's image on its volume, run to its end (removed after);
        a BackendError with what it said when it fails."""
        image = str((c.attrs.get("Config") or {}).get("Image") or c.attrs["Image"])
        spec = dataclasses.replace(self._helper_spec(c, image, what), entrypoint=command)
        client = c.client
        assert client is not None
        h = create(client, spec)
        try:
            h.start()
            code = int(h.wait(timeout=START_LIMIT).get("StatusCode", -1))
            if code != 0:
                said = container_logs.text(h, 12)
                raise BackendError(
                    f"the {what} in the accessory's volume failed (exit {code}): {said}"
                )
        finally:
            _gone(h)


def _parents(rel: str) -> tuple[str, ...]:
    """``a``, ``a/b`` for ``a/b``: the directories a tar makes before ``rel/…``."""
    parts = rel.split("/")
    return tuple("/".join(parts[: i + 1]) for i in range(len(parts)))


def _gone(h: Container) -> None:
    """A helper container removed, running or not (what it did is done or undone)."""
    with contextlib.suppress(docker.errors.NotFound):
        h.remove(force=True)


def _reloaded(c: Container) -> bool:
    c.reload()
    if c.status in ("exited", "dead"):
        raise BackendError(f"container {c.name} stopped ({c.status})")
    return True


def _pg_env(creds: Credentials) -> dict[str, str]:
    """The client tools' environment in the container: its own server, and the password
    (an exec's environment: never a command line)."""
    return {
        "PGHOST": "127.0.0.1",
        "PGPORT": str(SERVER_PORTS["postgres"]),
        "PGUSER": PG_USER,
        "PGPASSWORD": creds.password,
        "PGDATABASE": creds.database,
        "PGCONNECT_TIMEOUT": "10",
    }


def _exec(
    c: Container,
    words: Sequence[str],
    env: Mapping[str, str],
    what: str,
    out: IO[bytes] | None = None,
    tick: Callable[[], None] | None = None,
    user: str = "",
) -> bytes:
    """``words`` run in the container to their end (as ``user``: default the image's), its
    standard output streamed to ``out`` (or returned); a BackendError with the end of its
    standard error when it fails."""
    assert c.client is not None
    api = c.client.api
    made = api.exec_create(
        str(c.id), list(words), stdout=True, stderr=True, environment=dict(env) or None, user=user
    )
    got, err = bytearray(), bytearray()
    # read from its first byte (execs.py: docker-py's own read can lose a dump's start)
    for stream, data in exec_frames(api, made["Id"], patient=True):
        if stream == STDOUT:
            if out is not None:
                out.write(data)
            else:
                got += data
        elif stream == STDERR:
            err += data
            del err[:-2000]
        if tick is not None:
            tick()
    code = exit_code(api, made["Id"])
    if code != 0:
        said = err.decode(errors="replace").strip()[-800:]
        raise BackendError(f"{what} in container {c.name} failed (exit {code}): {said}")
    return bytes(got)


def _fetch(c: Container, path: str, into: Path) -> None:
    """The file at ``path`` in the container copied to ``into`` (0600 before a byte is
    written), streamed out of the tar ``get_archive`` sends."""
    assert c.client is not None
    chunks, _ = c.client.api.get_archive(str(c.id), path, chunk_size=1 << 20)
    fd = os.open(into, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as dst, tarfile.open(fileobj=_Chunks(chunks), mode="r|") as tar:
        member = tar.next()
        src = tar.extractfile(member) if member is not None and member.isfile() else None
        if src is None:
            raise BackendError(f"container {c.name}: {path} is not a file")
        shutil.copyfileobj(src, dst, 1 << 20)


class _Chunks(io.RawIOBase):
    """A file to read of the chunks an iterator gives."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


class TarOf:
    """A tar of one file (and the directories before it) for ``put_archive``, streamed
    from the disk: iterable again (a retried request sends it whole again), its length
    known (sent as Content-Length)."""

    def __init__(self, path: Path, name: str, mode: int, dirs: Sequence[str] = ()) -> None:
        self.path = path
        now = int(time.time())
        self.size = path.stat().st_size
        heads = []
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
            heads.append(info.tobuf(tarfile.GNU_FORMAT))
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = self.size, mode, now
        heads.append(info.tobuf(tarfile.GNU_FORMAT))
        self.head = b"".join(heads)
        self.tail = b"\0" * (-self.size % tarfile.BLOCKSIZE + 2 * tarfile.BLOCKSIZE)

    def __len__(self) -> int:
        return len(self.head) + self.size + len(self.tail)

    def __iter__(self) -> Iterator[bytes]:
        yield self.head
        with open(self.path, "rb") as f:
            yield from iter(lambda: f.read(1 << 20), b"")
        yield self.tail
