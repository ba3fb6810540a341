"""Release records, kept on the slot's first host, and the holder containers and tar
archives they (and the lock, :mod:`.lock`, and the files volumes) are made of.

Records and the lock are containers made from a tiny local image (``shipway-holder``: an
empty root filesystem imported through the Engine API on first use; no registry involved)
that are created and never started.

A **record** is a container whose label ``org.shipway.record`` holds the release
(gzip(JSON), base64). Creating a container is atomic in Docker, so a record is either
wholly written or not at all — a CLI killed half-way cannot leave a torn record. A rewrite
creates a new container with a higher sequence number, then removes the older ones;
readers take the highest sequence per revision. All records are read with one list call
(labels come with the list).

Why the first host and not every host: one place is consistent with itself; copies on
several hosts without a consensus protocol can disagree after a partial write, and a slot
with two "deployed" releases is worse than one that cannot deploy while its first host is
down (see docs/docker.md).
"""

from __future__ import annotations

import base64
import contextlib
import io
import tarfile
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import docker
import docker.errors
from docker.models.containers import Container

from shipway.backends.docker import labels, proxy_files
from shipway.backends.docker.containers import unreadable
from shipway.errors import RecordError
from shipway.release import codec
from shipway.release.model import Release

#: a record larger than this (compressed) is refused with a hint, not stored
RECORD_LIMIT = 512 * 1024


def ensure_holder_image(client: docker.DockerClient) -> None:
    """Import the empty ``shipway-holder`` image unless the host has it."""
    try:
        client.images.get(labels.HOLDER_IMAGE)
        return
    except docker.errors.ImageNotFound:
        pass
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("files", "etc"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
    repo, tag = labels.HOLDER_IMAGE.split(":")
    client.api.import_image_from_data(
        buf.getvalue(),
        repository=repo,
        tag=tag,
        changes=[f"LABEL {labels.HOLDER_LABEL}=1", 'CMD ["/shipway-holder"]'],
    )


T = TypeVar("T")


def holder_made(client: docker.DockerClient, create: Callable[[], T]) -> T:
    """``create()`` (a holder container made from ``shipway-holder``), importing the image
    first when the host has lost it: an image prune, another tool or a test may untag it
    at any moment, and a lock, record or note must still be writable then."""
    try:
        return create()
    except docker.errors.ImageNotFound:
        ensure_holder_image(client)
        return create()


def tar_of(files: dict[str, tuple[bytes, int]]) -> bytes:
    """A tar of ``{path: (content, mode)}`` (what ``put_archive`` takes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = mode
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put_tree(container: Container, path: str, files: dict[str, tuple[bytes, int]]) -> None:
    """Write ``{path: (content, mode)}`` under the directory ``path`` in a container: a
    shared proxy's files on an engine of this machine straight into its volume here
    (:mod:`.proxy_files`), anything else through the Engine API (``put_archive``)."""
    assert container.client is not None
    if not proxy_files.local_write(container.client, str(container.id), path, files):
        container.put_archive(path, tar_of(files))


def read_tree(container: Container, path: str) -> dict[str, tuple[bytes, int]]:
    """The regular files under ``path`` in a container (created, stopped or running), as
    ``{path relative to it: (content, mode)}``; empty when ``path`` does not exist."""
    assert container.client is not None
    return read_tree_of(container.client, str(container.id), path)


def read_tree_of(
    client: docker.DockerClient, container: str, path: str
) -> dict[str, tuple[bytes, int]]:
    """:func:`read_tree` of the container with this name or id (empty, too, when there is
    no such container, or one the engine left half removed: it has no files to read). A
    shared proxy's files on an engine of this machine are read from its volume here
    (:mod:`.proxy_files`)."""
    local = proxy_files.local_tree(client, container, path)
    return local if local is not None else archive_tree(client, container, path)


def archive_tree(
    client: docker.DockerClient, container: str, path: str
) -> dict[str, tuple[bytes, int]]:
    """:func:`read_tree_of` through the Engine API (an archive of ``path``)."""
    try:
        stream, _ = client.api.get_archive(container, path)
    except docker.errors.NotFound:
        return {}
    except docker.errors.APIError:
        if unreadable(client, container):
            return {}
        raise
    raw = b"".join(stream)
    out: dict[str, tuple[bytes, int]] = {}
    top = path.rstrip("/").rsplit("/", 1)[-1]
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            name = member.name
            if top and (name == top or name.startswith(top + "/")):
                name = name[len(top) + 1 :] if name != top else top
            handle = tar.extractfile(member)
            out[name] = (handle.read() if handle else b"", member.mode & 0o7777)
    return out


#: revision -> its record containers, as (id, sequence): what the slot's lock holder read
#: and wrote itself (only the holder writes records), so a write needs no list call first
RecordIndex = dict[int, list[tuple[str, int]]]


class RecordStore:
    """The records on one host. ``index``: the records as read and written under the slot's
    lock (kept up to date here); None: not known, so a write lists them first."""

    def __init__(
        self, client: docker.DockerClient, app: str, slot: str, index: RecordIndex | None = None
    ) -> None:
        self.client, self.app, self.slot = client, app, slot
        self.index = index

    def _containers(self, revision: int | None = None) -> list[Container]:
        filters = labels.slot_filter(self.app, self.slot, labels.RECORD_KIND)
        if revision is not None:
            filters["label"].append(f"{labels.REVISION}={revision}")
        found: list[Container] = self.client.containers.list(all=True, sparse=True, filters=filters)
        return found

    def _listed(self, revision: int | None = None) -> RecordIndex:
        out: RecordIndex = {}
        for c in self._containers(revision):
            _index(out, c)
        return out

    def read(self) -> list[Release]:
        latest: dict[int, tuple[int, str]] = {}
        if self.index is not None:
            self.index.clear()
        for c in self._containers():
            if self.index is not None:
                _index(self.index, c)
            tags: dict[str, str] = c.attrs.get("Labels") or {}
            try:
                revision, seq = int(tags[labels.REVISION]), int(tags[labels.SEQUENCE])
            except (KeyError, ValueError):
                continue
            if revision not in latest or seq > latest[revision][0]:
                latest[revision] = (seq, tags.get(labels.RECORD, ""))
        out = []
        for revision in sorted(latest):
            blob = latest[revision][1]
            try:
                raw = base64.b64decode(blob, validate=True)
            except ValueError as exc:
                raise RecordError(f"release record r{revision} is not valid base64") from exc
            out.append(codec.decode(raw))
        return out

    def write(self, records: Sequence[Release]) -> None:
        """Each record as a new container, then its older ones removed. Three calls fewer
        a record when the index is known: no list, no image check (the image is imported
        when the engine says it is missing), no inspection of what was created."""
        for release in records:
            blob = base64.b64encode(codec.encode(release, RECORD_LIMIT)).decode()
            if self.index is not None:
                older = self.index.get(release.revision, [])
            else:
                older = self._listed(release.revision).get(release.revision, [])
            seq = max([time.time_ns(), *(s + 1 for _, s in older)])
            created = self._create(
                labels.record(self.app, self.slot, release.revision, seq),
                {
                    **labels.base(self.app, self.slot, labels.RECORD_KIND),
                    labels.REVISION: str(release.revision),
                    labels.SEQUENCE: str(seq),
                    labels.RECORD: blob,
                },
            )
            if self.index is not None:
                self.index[release.revision] = [(created, seq)]
            for cid, _ in older:  # the new one is written: the old ones may go
                with contextlib.suppress(docker.errors.NotFound):
                    self.client.api.remove_container(cid, force=True)

    def _create(self, name: str, tags: dict[str, str]) -> str:
        made = holder_made(
            self.client,
            lambda: self.client.api.create_container(labels.HOLDER_IMAGE, name=name, labels=tags),
        )
        return str(made["Id"])

    def delete(self, revisions: Sequence[int]) -> None:
        known = self.index if self.index is not None else self._listed()
        for revision in revisions:
            for cid, _ in known.pop(revision, []):
                with contextlib.suppress(docker.errors.NotFound):
                    self.client.api.remove_container(cid, force=True)


def _index(index: RecordIndex, c: Container) -> None:
    """Add a listed record container to ``index`` under its revision; one whose sequence
    label is missing or garbled counts as the oldest (it is removed by the next write of
    its revision, as every older one is)."""
    tags: dict[str, str] = c.attrs.get("Labels") or {}
    try:
        revision = int(tags[labels.REVISION])
    except (KeyError, ValueError):
        return
    try:
        seq = int(tags.get(labels.SEQUENCE, "0"))
    except ValueError:
        seq = 0
    index.setdefault(revision, []).append((str(c.id), seq))
