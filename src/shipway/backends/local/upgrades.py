"""A Postgres accessory moved to another major version, asked for (``--upgrade-accessory``):
a dump and restore, never an in-place start of the new server on the old data.

In order: every tool both versions need is looked for first (nothing is touched when one
is missing); the old server (which holds the data) is dumped by its own ``pg_dump``, and the
dump kept beside the data with its checksum (``upgrade-<old>-to-<new>.dump`` and its
``.sha256``: ``shipway restore`` reads it back); the old server is stopped and its data
directory renamed ``data.<old>`` (kept); a new cluster is made by the new version's
``initdb`` with the same credentials; the new server started and waited on until it answers;
the dump loaded by the new ``pg_restore``. Only then is ``data.<old>`` deleted. When any of
it fails, the new cluster is moved aside (``data.<new>.failed.<time>``), ``data.<old>`` put
back and the old server started on it: the data is never lost.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from shipway.backends import backups as files
from shipway.backends.accessories import Credentials
from shipway.backends.local import servers, wire
from shipway.backends.local.accessories import LocalAccessories, accessory_conf, program_name
from shipway.backends.local.backups import pg_dump, pg_restore, pg_tool
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.errors import BackendError
from shipway.spec.accessories import Accessory
from shipway.spec.model import Target


def upgrade(
    local: LocalAccessories,
    target: Target,
    accessory: Accessory,
    creds: Credentials,
    here: Path,
    deadline: float,
    reporter: Reporter,
) -> Failure | None:
    """The accessory's cluster at ``here/data`` moved to ``accessory.version``; its failure
    (the old server running again on its data), or None (the new one answers)."""
    data, log = here / "data", here / "server.log"
    old, new = servers.data_version(data) or "", accessory.version or ""
    pg_tool(old, "pg_dump", local.environ)
    for tool in ("initdb", "postgres", "pg_restore", "psql"):
        pg_tool(new, tool, local.environ)
    kept = here / f"data.{old}"
    if kept.exists():
        raise BackendError(
            f"{kept} is there: an earlier upgrade was cut short and left the postgres {old} "
            "data there; nothing was done (hint: look at it, move it away, deploy again)"
        )
    name = program_name(target, accessory.name)
    if not wire.answers("postgres", creds):
        raise BackendError(
            f"accessory {accessory.name} (postgres {old}) does not answer, and its data is "
            "dumped from it: nothing was done (hint: deploy without the version change "
            "first, so that it runs)"
        )
    dump = here / f"upgrade-{old}-to-{new}.dump"
    partial = files.partial_path(dump)
    reporter.line(f"  accessory {accessory.name}: pg_dump of postgres {old} to {dump}")
    try:
        pg_dump(old, creds, partial, local.environ, reporter)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    files.seal(partial, dump)
    reporter.line(f"  accessory {accessory.name}: stopping postgres {old}; its data kept in {kept}")
    local.supervisor.stop(name)
    data.rename(kept)
    try:
        reporter.line(f"  accessory {accessory.name}: initdb (postgres {new})")
        servers.initdb(new, data, creds, local.environ, log)
        made = servers.data_version(data)
        if made != new:
            raise BackendError(f"the initdb of postgres {new} made a cluster of version {made}")
        local.supervisor.add(name, pg_conf(local, name, new, data, creds, here))
        failure = local._accessory_gate(accessory, creds, name, log, deadline, reporter)
        if failure is not None:
            raise BackendError(failure.message)
        pg_restore(new, creds, dump, local.environ, reporter)
    except BaseException as exc:
        failed = _put_back(local, name, old, new, here, creds)
        if not isinstance(exc, Exception):
            raise
        back = Accessory(accessory.name, "postgres", old)
        again = local._accessory_gate(back, creds, name, log, deadline, reporter)
        running = "runs again on its data" if again is None else "was put back but does not answer"
        return Failure(
            reason=Reason.STEP_FAILED,
            message=(
                f"the upgrade of accessory {accessory.name} to postgres {new} failed: {exc}; "
                f"postgres {old} {running} (kept whole; the new cluster is in {failed}, "
                f"the dump in {dump})"
            ),
        )
    shutil.rmtree(kept)
    reporter.line(
        f"  accessory {accessory.name}: postgres {new} answers with the data restored; "
        f"{kept.name} deleted, the dump kept in {dump.name}"
    )
    return None


def pg_conf(
    local: LocalAccessories, name: str, version: str, data: Path, creds: Credentials, here: Path
) -> str:
    """The supervised program of a Postgres accessory of ``version``."""
    command = servers.pg_command(version, data, creds.port, local.environ)
    return accessory_conf(name, command, here, "INT")  # INT: Postgres' fast shutdown


def _put_back(
    local: LocalAccessories, name: str, old: str, new: str, here: Path, creds: Credentials
) -> Path:
    """The new cluster moved aside, the old one put back and its server started."""
    data, kept = here / "data", here / f"data.{old}"
    local.supervisor.stop(name)
    failed = here / f"data.{new}.failed.{int(time.time())}"
    if data.exists():
        data.rename(failed)
    kept.rename(data)
    local.supervisor.add(name, pg_conf(local, name, old, data, creds, here))
    return failed
