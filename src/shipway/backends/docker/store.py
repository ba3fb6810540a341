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
from collections.abc import Sequence

import docker
import docker.errors
from docker.models.containers import Container

from shipway.backends.docker import labels
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


def read_tree(container: Container, path: str) -> dict[str, tuple[bytes, int]]:
    """The regular files under ``path`` in a container (created, stopped or running), as
    ``{path relative to it: (content, mode)}``; empty when ``path`` does not exist."""
    try:
        stream, _ = container.get_archive(path)
    except docker.errors.NotFound:
        return {}
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


class RecordStore:
    def __init__(self, client: docker.DockerClient, app: str, slot: str) -> None:
        self.client, self.app, self.slot = client, app, slot

    def _containers(self, revision: int | None = None) -> list[Container]:
        filters = labels.slot_filter(self.app, self.slot, labels.RECORD_KIND)
        if revision is not None:
            filters["label"].append(f"{labels.REVISION}={revision}")
        found: list[Container] = self.client.containers.list(all=True, sparse=True, filters=filters)
        return found

    def read(self) -> list[Release]:
        latest: dict[int, tuple[int, str]] = {}
        for c in self._containers():
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
        ensure_holder_image(self.client)
        for release in records:
            blob = base64.b64encode(codec.encode(release, RECORD_LIMIT)).decode()
            older = self._containers(release.revision)
            seqs = [int((c.attrs.get("Labels") or {}).get(labels.SEQUENCE, "0")) for c in older]
            seq = max([time.time_ns(), *(s + 1 for s in seqs)])
            self.client.containers.create(
                labels.HOLDER_IMAGE,
                name=labels.record(self.app, self.slot, release.revision, seq),
                labels={
                    **labels.base(self.app, self.slot, labels.RECORD_KIND),
                    labels.REVISION: str(release.revision),
                    labels.SEQUENCE: str(seq),
                    labels.RECORD: blob,
                },
            )
            for c in older:  # the new one is written: the old ones may go
                with contextlib.suppress(docker.errors.NotFound):
                    c.remove(force=True)

    def delete(self, revisions: Sequence[int]) -> None:
        for revision in revisions:
            for c in self._containers(revision):
                with contextlib.suppress(docker.errors.NotFound):
                    c.remove(force=True)
