"""Backups of the slot's accessories in its namespace, and putting one back
(:class:`~shipway.backends.accessories.AccessoryBackups`), through the API server's ``exec``
of the accessory's pod — lightkube's own (the kubelet's ``v5.channel.k8s.io`` WebSocket
protocol: standard output streamed into the local file, the backup sent to standard input
in chunks and the input closed after it). No protocol code here, no kubectl.

The password never goes on a command line: every command is ``sh -c`` in the pod's own
environment, which holds it (``POSTGRES_PASSWORD``, ``REDIS_PASSWORD``, from the Secret), and
hands it to the tool as ``PGPASSWORD`` / ``REDISCLI_AUTH``.

Postgres: ``pg_dump`` of the accessory's own image (its major version checked against the
server's), its output streamed out. A restore copies the file into the pod's ``/tmp``,
loads it into a new database and swaps it in
(:func:`~shipway.backends.backups.pg_swap_restore`), as the other backends do.

Redis: ``redis-cli --rdb`` — the server forks and sends a snapshot as to a replica, written
in the pod's ``/tmp`` and streamed out. A restore copies the snapshot into
``/data/shipway-restore/`` of the claim, starts a second ``redis-server`` on it in the same
pod (loopback only, another port), and once it has loaded, makes the accessory its replica:
Redis itself receives the data set whole before it drops its own (a sync that fails leaves
the data as it was), then the accessory is made a primary again, its append-only file
rewritten from what it loaded, the count of keys checked, and the loader stopped and its
directory deleted. The accessory's pod is never restarted.
"""

from __future__ import annotations

import asyncio
import io
import os
import secrets as _random
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

from shipway.backends import backups as files
from shipway.backends.accessories import Credentials
from shipway.backends.kubernetes.accessories import KubernetesAccessories, object_name
from shipway.backends.protocol import Reporter
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.spec.accessories import Accessory
from shipway.spec.model import Target

#: the client tools' environment, from the pod's own (the password never on a command line)
PG_ENV = (
    'export PGPASSWORD="$POSTGRES_PASSWORD" PGUSER="$POSTGRES_USER" PGHOST=127.0.0.1 '
    'PGDATABASE="$POSTGRES_DB" PGCONNECT_TIMEOUT=10; '
)
REDIS_ENV = 'export REDISCLI_AUTH="$REDIS_PASSWORD"; '
#: a snapshot of the server, as a replica gets one, written out
REDIS_BACKUP = (
    REDIS_ENV + 'f=/tmp/shipway-backup-$$.rdb; redis-cli --rdb "$f" >&2 && cat "$f"; '
    's=$?; rm -f "$f"; exit $s'
)
#: a snapshot on standard input loaded by a second server, and the accessory made its
#: replica until it has it, then a primary again with its append-only file rewritten
REDIS_RESTORE = (
    REDIS_ENV
    + r"""
set -u
dir=/data/shipway-restore
loader() { REDISCLI_AUTH= redis-cli -p 6390 "$@"; }
info() { redis-cli INFO "$1" | tr -d '\r' | grep "^$2:" | cut -d: -f2; }
fail() {
  echo "$*" >&2
  [ -s "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null
  rm -rf "$dir"
  exit 1
}
waits() {  # until "$1" is true, 0.1 s apart, at most $2 tries
  n=0
  until eval "$1"; do
    n=$((n + 1)); [ "$n" -gt "$2" ] && return 1
    sleep 0.1
  done
}
rm -rf "$dir" && mkdir -p "$dir" && cat > "$dir/dump.rdb" || fail "could not write $dir/dump.rdb"
redis-server --port 6390 --bind 127.0.0.1 --protected-mode no --dir "$dir" \
  --appendonly no --save "" --daemonize yes --pidfile "$dir/pid" --logfile "$dir/log" \
  || fail "could not start a server on the snapshot"
loaded() {
  [ "$(loader PING 2>/dev/null)" = PONG ] && return 0
  if [ -s "$dir/pid" ] && ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
    fail "redis-server did not load the snapshot: $(tail -n 4 "$dir/log")"
  fi
  return 1
}
waits loaded 36000 || fail "the snapshot did not load within an hour"
keys=$(loader DBSIZE)
echo "loaded the snapshot: $keys keys" >&2
[ "$(redis-cli REPLICAOF 127.0.0.1 6390)" = OK ] || fail "REPLICAOF refused"
synced() { [ "$(info replication master_link_status)" = up ] \
  && [ "$(info replication master_sync_in_progress)" = 0 ]; }
if ! waits synced 36000; then
  redis-cli REPLICAOF NO ONE >/dev/null
  fail "the accessory did not take the snapshot within an hour; its data is as it was"
fi
redis-cli REPLICAOF NO ONE >/dev/null || fail "REPLICAOF NO ONE refused"
rewritten() { [ "$(info persistence aof_enabled)" != 1 ] || {
  [ "$(info persistence aof_rewrite_in_progress)" = 0 ] \
  && [ "$(info persistence aof_rewrite_scheduled)" = 0 ]; }; }
waits rewritten 36000 || fail "the append-only file was not rewritten within an hour"
now=$(redis-cli DBSIZE)
[ "$now" = "$keys" ] || fail "the accessory holds $now keys after the sync, the snapshot $keys"
loader SHUTDOWN NOSAVE >/dev/null 2>&1
rm -rf "$dir"
echo "restored: $now keys" >&2
"""
)


class KubernetesBackups(KubernetesAccessories):
    """The protocol's AccessoryBackups (:mod:`shipway.backends.accessories`)."""

    def backup_accessory(
        self, target: Target, accessory: Accessory, into: Path, reporter: Reporter
    ) -> tuple[str, str]:
        self._serves(target)
        pod, _, version = self._answering(accessory)
        fd = os.open(into, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            if accessory.kind == "postgres":
                tool = self._pg_dump_of(pod, version)
                dump = "exec pg_dump " + " ".join(files.PG_DUMP_WORDS)
                reporter.line(f"  pg_dump in pod {pod}")
                self._sh(pod, "postgres", PG_ENV + dump, "pg_dump", stdout=out)
                return version, f"{tool} in pod {pod}"
            reporter.line(f"  redis-cli --rdb in pod {pod}")
            self._sh(pod, "redis", REDIS_BACKUP, "redis-cli --rdb", stdout=out)
            return version, f"redis-cli --rdb in pod {pod}"

    def restore_accessory(
        self,
        clearance: Clearance,
        target: Target,
        accessory: Accessory,
        source: Path,
        reporter: Reporter,
    ) -> str:
        self._guard(clearance, target)
        pod, creds, version = self._answering(accessory)
        if accessory.kind == "postgres":
            self._pg_restore(pod, creds, version, source, reporter)
            return (
                f"restored {source.name} into accessory {accessory.name} (postgres {version}, "
                f"pod {pod}): database {creds.database} replaced"
            )
        reporter.line(f"  loading {source.name} in a second server in pod {pod}")
        with open(source, "rb") as data:
            said = self._sh(pod, "redis", REDIS_RESTORE, "the restore", stdin=data)
        for line in said.splitlines():
            reporter.line(f"  {line}")
        return (
            f"restored {source.name} into accessory {accessory.name} (redis {version}, pod "
            f"{pod}): its whole data set replaced"
        )

    # -- what runs -----------------------------------------------------------------------

    def _answering(self, accessory: Accessory) -> tuple[str, Credentials, str]:
        """Its pod, credentials and server version, when its pod is ready; an InputError
        naming what to do otherwise (nothing touched)."""
        slot = self.slot.name
        pod = f"{object_name(self.app.name, accessory.name)}-0"
        with self._edge(f"accessory {accessory.name}"):
            creds = self._credentials(accessory, False)
            found = self._pod(pod)
        if creds is None or found is None:
            raise InputError(
                f"accessory {accessory.name} was never started in slot {slot} (hint: shipway "
                f"deploy {slot} creates it)"
            )
        statuses = (found.status.containerStatuses if found.status else None) or []
        if not any(s.name == accessory.kind and s.ready for s in statuses):
            phase = found.status.phase if found.status else "?"
            raise InputError(
                f"accessory {accessory.name} runs in slot {slot} but its pod {pod} is not "
                f"ready ({phase}) (hint: shipway deploy {slot} starts it)"
            )
        if accessory.kind == "postgres":
            said = self._sh(pod, "postgres", PG_ENV + 'psql -XAtc "show server_version"', "psql")
            version = files.version_word(said)
        else:
            said = self._sh(pod, "redis", REDIS_ENV + "redis-cli INFO server", "redis-cli")
            version = next(
                (
                    w.split(":", 1)[1].strip()
                    for w in said.splitlines()
                    if w.startswith("redis_version:")
                ),
                "",
            )
        if not version:
            raise BackendError(f"pod {pod}: its server's version could not be read ({said[:200]})")
        return pod, creds, version

    def _pod(self, name: str) -> Any:
        from lightkube.core.exceptions import ApiError
        from lightkube.resources.core_v1 import Pod

        try:
            return self.client.get(Pod, name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    def _sh(
        self,
        pod: str,
        container: str,
        script: str,
        what: str,
        stdout: IO[bytes] | None = None,
        stdin: IO[bytes] | None = None,
    ) -> str:
        """``sh -c script`` run in the pod's container to its end (lightkube's exec), its
        standard output streamed to ``stdout`` (or returned, with its standard error); a
        BackendError with the end of its standard error when it fails."""
        # here, not at the top: the websocket client (wsproto, h11, anyio's streams) is
        # ~25 ms of every Kubernetes command's start, and only an exec uses it
        from httpx2.websockets import HTTPXWSException, WebSocketUpgradeError

        kept = io.BytesIO()
        out = stdout if stdout is not None else kept
        err = io.BytesIO()
        with self._edge(f"{what} in pod {pod}"):
            try:
                done = asyncio.run(self._exec(pod, container, script, stdin, out, err))
            except WebSocketUpgradeError as exc:
                code = exc.response.status_code
                hint = (
                    f" (hint: the identity needs pods/exec, verbs get and create, in namespace "
                    f"{self.namespace}: docs/kubernetes.md, Least privilege)"
                    if code == 403
                    else ""
                )
                raise BackendError(
                    f"{what} in pod {pod}: the API server refused the exec ({code} "
                    f"{exc.response.reason_phrase}){hint}"
                ) from exc
            except HTTPXWSException as exc:
                raise BackendError(f"{what} in pod {pod}: the exec broke off: {exc}") from exc
        said = err.getvalue().decode(errors="replace").strip()
        if done.exit_code != 0:
            raise BackendError(f"{what} in pod {pod} failed (exit {done.exit_code}): {said[-800:]}")
        if stdout is not None:
            return said
        return kept.getvalue().decode(errors="replace") + said

    async def _exec(
        self,
        pod: str,
        container: str,
        script: str,
        stdin: IO[bytes] | None,
        out: IO[bytes],
        err: IO[bytes],
    ) -> Any:
        """One exec on a client of its own, closed after it. The asynchronous client: the
        synchronous one's WebSocket session leaves a thread reading the closed socket, which
        takes the bytes of the next connection made on the same descriptor (found here:
        ``[SSL: WRONG_VERSION_NUMBER]`` on 2 of 40 execs in a loop; 0 of 60 this way)."""
        from lightkube import AsyncClient

        client = AsyncClient(config=self.client.config, namespace=self.namespace)
        try:
            return await client.exec(
                pod,
                namespace=self.namespace,
                container=container,
                command=["sh", "-c", script],
                stdin=cast(BinaryIO | None, stdin),
                stdout=cast(BinaryIO, out),
                stderr=cast(BinaryIO, err),
                decode=None,
                timeout=files.TOOL_LIMIT,
            )
        finally:
            await client.close()

    # -- Postgres ------------------------------------------------------------------------

    def _pg_dump_of(self, pod: str, server: str) -> str:
        """The image's ``pg_dump`` (``pg_dump 15.18``), once it is the server's major."""
        said = self._sh(pod, "postgres", "pg_dump --version", "pg_dump --version").strip()
        return files.own_pg_dump(said, server, f"pod {pod}")

    def _pg_restore(
        self, pod: str, creds: Credentials, version: str, source: Path, reporter: Reporter
    ) -> None:
        path = f"/tmp/shipway-restore-{_random.token_hex(4)}.dump"
        reporter.line(f"  copying {source.name} into pod {pod}")
        with open(source, "rb") as data:
            self._sh(pod, "postgres", f"umask 077; cat > {path}", "copying the dump", stdin=data)
        try:
            self._pg_load(pod, creds, version, path, reporter)
        finally:
            try:
                self._sh(pod, "postgres", f"rm -f {path}", "rm")
            except BackendError as exc:
                reporter.line(f"  warning: {path} in pod {pod} was not removed: {exc}")

    def _pg_load(
        self, pod: str, creds: Credentials, version: str, path: str, reporter: Reporter
    ) -> None:
        """The dump at ``path`` in the pod made the app's database (loaded beside it and
        swapped in: :func:`~shipway.backends.backups.pg_swap_restore`)."""
        env = PG_ENV + "export PGDATABASE=postgres; "

        def sql(statement: str) -> None:
            quoted = statement.replace("'", "'\\''")
            self._sh(pod, "postgres", f"{env}psql -X -q -v ON_ERROR_STOP=1 -c '{quoted}'", "psql")

        def load(staging: str) -> None:
            words = " ".join(files.PG_RESTORE_WORDS)
            script = f"{env}exec pg_restore {words} --dbname='{staging}' {path}"
            self._sh(pod, "postgres", script, "pg_restore")

        files.pg_swap_restore(creds.database, files.pg_major(version), sql, load, reporter.line)
