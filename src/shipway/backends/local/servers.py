"""The servers an accessory runs on this machine: Debian's own binaries, by major version.

Postgres: ``/usr/lib/postgresql/<major>/bin`` (Debian's ``postgresql-<major>``, which keeps
every installed major version side by side — so a pinned major is a path, and two slots may
run two majors); Redis: ``$SHIPWAY_REDIS_ROOT/<major>/bin/redis-server`` when that directory
is given and holds the major (laid out as Debian's Postgres: one directory per major, so a
Redis upgrade finds the new major beside the old), else ``redis-server`` on ``PATH``
(Debian's ``redis-server``, one major). Why the distribution's packages and not a wheel:
docs/local.md, *Accessories*.

Postgres refuses to run as root ("root" execution of the PostgreSQL server is not
permitted). Run by root, shipway starts it (and ``initdb``) in a user namespace of its own
where it is uid 1, mapped to root outside (``unshare -U --map-user=1 --map-group=1``): the
files stay root's and 0700, reachable by no other user of the machine, and no account is
needed. Every server listens on 127.0.0.1 only, on the port the slot was given once.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from shipway.backends import accessories
from shipway.backends.accessories import Credentials
from shipway.errors import BackendError
from shipway.spec.accessories import Accessory

PG_ROOT = Path("/usr/lib/postgresql")
#: a directory laid out as Debian's (``<major>/bin/postgres``) to find Postgres in instead
ROOT_VARIABLE = "SHIPWAY_POSTGRES_ROOT"
USER = accessories.PG_USER


def pg_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where the Postgres majors are: ``$SHIPWAY_POSTGRES_ROOT``, else Debian's place."""
    given = (os.environ if environ is None else environ).get(ROOT_VARIABLE)
    return Path(given) if given else PG_ROOT


def pg_bin(version: str, environ: Mapping[str, str] | None = None) -> Path:
    return pg_root(environ) / version / "bin"


def pg_installed(environ: Mapping[str, str] | None = None) -> list[str]:
    """The Postgres major versions installed here (Debian's layout), oldest first."""
    root = pg_root(environ)
    try:
        found = [p.name for p in root.iterdir() if (p / "bin" / "postgres").is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda v: int(v) if v.isdigit() else 0)


#: a directory laid out ``<major>/bin/redis-server`` to find each Redis major in first
REDIS_ROOT_VARIABLE = "SHIPWAY_REDIS_ROOT"


def redis_binary(environ: Mapping[str, str], version: str | None = None) -> str | None:
    """The ``redis-server`` of major ``version``: ``$SHIPWAY_REDIS_ROOT/<major>/bin``'s
    when it is there, else the one on ``PATH`` (its major is checked when it starts)."""
    given = environ.get(REDIS_ROOT_VARIABLE)
    mine = Path(given) / version / "bin" / "redis-server" if given and version else None
    if mine is not None and mine.is_file():
        return str(mine)
    return shutil.which("redis-server", path=environ.get("PATH", os.defpath))


def problem(accessory: Accessory, environ: Mapping[str, str], spec_file: str) -> str | None:
    """What this machine lacks to run ``accessory`` (reads only: no subprocess)."""
    key = f"{spec_file}: accessories.{accessory.name}.version"
    if accessory.kind == "postgres":
        version = accessory.version or ""
        if (pg_bin(version, environ) / "postgres").is_file():
            return _needs_unshare(environ, spec_file, accessory.name)
        have = pg_installed(environ)
        other = f'; or version = "{have[-1]}", installed here' if have else ""
        return (
            f"{key}: postgres {version} is not installed on this machine "
            f"({pg_bin(version, environ) / 'postgres'} is missing) (hint: apt-get install "
            f"postgresql-{version}{other})"
        )
    if accessory.kind == "redis":
        if redis_binary(environ, accessory.version) is None:
            return (
                f"{key}: redis-server is not installed on this machine (not on PATH) "
                "(hint: apt-get install redis-server)"
            )
        return None
    return f"{spec_file}: accessories.{accessory.name}: the local backend runs no such accessory"


def _needs_unshare(environ: Mapping[str, str], spec_file: str, name: str) -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare", path=environ.get("PATH", os.defpath)):
        return None
    return (
        f"{spec_file}: accessories.{name}: postgres does not run as root, and the unshare "
        "command that runs it as another uid is missing (hint: apt-get install util-linux, "
        "or run shipway as another user)"
    )


def as_server(environ: Mapping[str, str]) -> list[str]:
    """The words that run a Postgres program as a non-root uid when shipway is root."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare", path=environ.get("PATH", os.defpath)) or "unshare"
    return [unshare, "-U", "--map-user=1", "--map-group=1"]


def pg_command(version: str, data: Path, port: int, environ: Mapping[str, str]) -> list[str]:
    return [
        *as_server(environ),
        str(pg_bin(version, environ) / "postgres"),
        "-D",
        str(data),
        "-c",
        "listen_addresses=127.0.0.1",
        "-p",
        str(port),
        "-c",
        "unix_socket_directories=",
    ]


def initdb(
    version: str, data: Path, creds: Credentials, environ: Mapping[str, str], log: Path
) -> None:
    """Make a new cluster at ``data`` (which must not exist): the ``shipway`` superuser
    with the password (SCRAM), and the app's database. The password goes through a 0600
    file deleted at once, never a command line. Made under a temporary name and renamed,
    so a cluster is there whole or not at all."""
    partial = data.with_name(data.name + ".init")
    shutil.rmtree(partial, ignore_errors=True)
    pwfile = data.with_name("initdb.pw")
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, creds.password.encode() + b"\n")
    finally:
        os.close(fd)
    env = {k: v for k, v in environ.items() if k in ("PATH", "HOME", "TZ")} | {"LANG": "C.UTF-8"}
    try:
        _run(
            [
                *as_server(environ),
                str(pg_bin(version, environ) / "initdb"),
                "-D",
                str(partial),
                "-U",
                USER,
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ],
            env,
            log,
            "initdb",
        )
    finally:
        pwfile.unlink(missing_ok=True)
    create = f'CREATE DATABASE "{creds.database}";\n'
    if creds.database != "postgres":
        postgres = str(pg_bin(version, environ) / "postgres")
        single = [postgres, "--single", "-D", str(partial), "postgres"]
        _run([*as_server(environ), *single], env, log, "create the database", create)
    partial.rename(data)


def _run(words: list[str], env: Mapping[str, str], log: Path, what: str, stdin: str = "") -> None:
    with open(log, "ab") as out:
        done = subprocess.run(
            words,
            input=stdin.encode(),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=log.parent,
            timeout=300,
            check=False,
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-600:].strip()
        raise BackendError(f"postgres {what} failed (exit {done.returncode}): {tail}")


def data_version(data: Path) -> str | None:
    """The major version a Postgres cluster's data belongs to (its ``PG_VERSION``)."""
    try:
        return (data / "PG_VERSION").read_text().strip() or None
    except OSError:
        return None


def redis_conf(data: Path, creds: Credentials, appendonly: bool = True) -> str:
    """redis.conf of an accessory (0600: it holds the password). ``appendonly`` False: for
    the start that loads a restored RDB (with the append-only file on, Redis would load
    that instead)."""
    return "\n".join(
        [
            "bind 127.0.0.1",
            "protected-mode yes",
            f"port {creds.port}",
            f'dir "{data}"',
            "daemonize no",
            f"appendonly {'yes' if appendonly else 'no'}",
            "save 60 1",
            f'requirepass "{creds.password}"',
            "",
        ]
    )


def redis_version(binary: str) -> str | None:
    """The major version of ``redis-server`` (it prints ``v=7.0.15``)."""
    done = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    found = re.search(r"v=(\d+)\.", done.stdout)
    return found.group(1) if found else None
