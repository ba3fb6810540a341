"""A shared proxy's files read and written straight in its volume on this machine, where the
engine is this machine's: no archive through the Engine API.

Every look-up of who serves a host name, every change of a proxy's routes and every observe
reads a proxy's ``slots.json`` or its whole config directory. Through the Engine API each
read is a ``GET …/archive``, for which the engine starts a helper process of its own (a
re-exec of its binary that reads the files from inside the container's root): tens of
milliseconds of CPU each, the biggest share of the engine's work in a deploy on a host with
a few proxies. An engine on this machine keeps the proxy's config volume in a directory
here (``/var/lib/docker/volumes/<volume>/_data``, as the container's mount says), which its
own user (root) may read: whoever may read it can use the engine already.

What must never happen: another proxy's files taken for this one's. A path the engine
reports need not be this machine's (an engine behind a forwarded socket reports paths of
its own machine, and this machine may run a proxy with the same volume name). So a volume
directory is used only while its ``caddy.json`` names this very container (its ``@id``,
:func:`.admin.identity`, the full container id), checked at each read; else (and when
it cannot be read: another user, a proxy whose config is not written yet or was composed
before the ``@id``) the files are read through the Engine API as before. A file a change
replaces at the moment of a read is read as the archive would read it: whole, missing, or
cut short (the callers read JSON and take a cut file as not read whole).

Writes (every change of a proxy's routes, pool entries and upstreams: ``PUT …/archive``
through the API, the same helper process each) are made here under the same check, each
file renamed over the old one, so a reader never finds it missing or cut short.
"""

from __future__ import annotations

import os
import stat
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors

from shipway.backends.docker import admin, caddy

#: full container id → (the config directory in it, that volume's directory here), as its
#: mounts say (its identity is checked at each read)
_MOUNTS: dict[str, tuple[str, str]] = {}
#: the engines (their API clients) whose volumes are not on this machine: a proxy's volume
#: directory was not here, so no other is either; their reads and writes are not tried
#: here again
_ELSEWHERE: weakref.WeakSet[Any] = weakref.WeakSet()


def local_tree(
    client: docker.DockerClient, container: str, path: str
) -> dict[str, tuple[bytes, int]] | None:
    """The regular files under ``path`` in the proxy ``container`` (its name or id), read
    from its config volume's directory on this machine, as :func:`.records.read_tree_of`
    gives them; None when they cannot be read that way."""
    target = _here(client, container, path)
    if target is None:
        return None
    try:
        info = target.lstat()
    except FileNotFoundError:
        return {}
    except OSError:
        return None
    if stat.S_ISREG(info.st_mode):
        content = _read(target)
        return {} if content is None else {target.name: (content, info.st_mode & 0o7777)}
    if not stat.S_ISDIR(info.st_mode):
        return {}
    out: dict[str, tuple[bytes, int]] = {}
    for top, _dirs, files in os.walk(target):
        for name in files:
            file = Path(top, name)
            try:
                mode = file.lstat().st_mode
            except FileNotFoundError:
                continue  # replaced at this moment: as if not there yet
            content = _read(file) if stat.S_ISREG(mode) else None
            if content is not None:
                out[str(file.relative_to(target))] = (content, mode & 0o7777)
    return out


def local_write(
    client: docker.DockerClient, container: str, path: str, files: Mapping[str, tuple[bytes, int]]
) -> bool:
    """Write ``{name: (content, mode)}`` under the directory ``path`` of the proxy
    ``container`` straight into its config volume's directory on this machine, in the
    order an archive would (by name), each file replaced whole (written beside it, then
    renamed over it: Caddy, which reads some of them at each request, sees the old file or
    the new one, never none). False when they cannot be written that way: the caller puts
    them all through the Engine API (those written already are written again, the same)."""
    target = _here(client, container, path)
    if target is None or not target.is_dir():
        return False
    try:
        for name, (content, mode) in sorted(files.items()):
            _replace(target / name, content, mode)
    except OSError:
        return False
    return True


def _replace(file: Path, content: bytes, mode: int) -> None:
    """``file`` made anew with ``content`` and ``mode``: written beside it, then renamed over
    it; a failure leaves nothing beside it."""
    file.parent.mkdir(parents=True, exist_ok=True)
    beside = file.with_name(f".{file.name}.{os.getpid()}.{threading.get_ident()}")
    try:  # made unreadable to others until its mode is set: a key may be in it
        with os.fdopen(os.open(beside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
            out.write(content)
            os.fchmod(out.fileno(), mode & 0o7777)
        os.replace(beside, file)
    except OSError:
        beside.unlink(missing_ok=True)
        raise


def _here(client: docker.DockerClient, container: str, path: str) -> Path | None:
    """Where ``path`` of the proxy ``container`` is on this machine: in its config volume's
    directory, while that directory's config names this very container (None: not so)."""
    if path.rstrip("/") != caddy.CONFIG_DIR and not path.startswith(caddy.CONFIG_DIR + "/"):
        return None  # not a proxy's config directory
    if client.api in _ELSEWHERE:
        return None
    found = _mount(client, container)
    if found is None:
        return None
    full, (inside, here) = found
    if path.rstrip("/") != inside and not path.startswith(inside + "/"):
        return None
    try:  # the volume here is this container's: its config names it
        config = Path(here, caddy.CONFIG_FILE).read_bytes()
    except OSError:
        return None
    if f'"@id": "{admin.identity(full)}"'.encode() not in config:
        return None
    return Path(here + path.rstrip("/")[len(inside) :])


def _read(file: Path) -> bytes | None:
    try:
        return file.read_bytes()
    except OSError:
        return None


def _mount(client: docker.DockerClient, container: str) -> tuple[str, tuple[str, str]] | None:
    """The container's full id, and where its config volume is mounted in it and kept on
    its engine's machine (None: no such volume, or the engine does not say). A name is
    looked up each time (another engine may have a container of that name)."""
    if container in _MOUNTS:
        return container, _MOUNTS[container]
    try:
        attrs = client.api.inspect_container(container)
    except (docker.errors.APIError, KeyError, TypeError):
        return None
    full = str(attrs.get("Id") or "")
    for mount in attrs.get("Mounts") or []:
        source = str(mount.get("Source") or "").rstrip("/")
        inside = str(mount.get("Destination") or "").rstrip("/")
        if mount.get("Type") == "volume" and inside == caddy.CONFIG_DIR and source and full:
            if not os.path.isdir(source):
                _ELSEWHERE.add(client.api)
                return None
            _MOUNTS[full] = (inside, source)
            return full, _MOUNTS[full]
    return None
