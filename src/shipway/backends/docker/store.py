"""Release records and the slot's lock, kept on the slot's first host.

Both are containers made from a tiny local image (``shipway-holder``: an empty root
filesystem imported through the Engine API on first use; no registry involved) that are
created and never started:

* a **record** is a container whose label ``org.shipway.record`` holds the release
  (gzip(JSON), base64). Creating a container is atomic in Docker, so a record is either
  wholly written or not at all — a CLI killed half-way cannot leave a torn record. A
  rewrite creates a new container with a higher sequence number, then removes the older
  ones; readers take the highest sequence per revision. All records are read with one
  list call (labels come with the list).
* the **lock** is the container named ``shipway-<app>-<slot>-lock``: container names are
  unique, so creating it is the atomic "take". Its labels name the holder (user, machine,
  pid), since when, and for how long; a file inside it (``put_archive``) holds the time of
  the last renewal. An expired lock — or one whose holder process is gone on this very
  machine — is broken with a line naming the holder.

Why the first host and not every host: one place is consistent with itself; copies on
several hosts without a consensus protocol can disagree after a partial write, and a slot
with two "deployed" releases is worse than one that cannot deploy while its first host is
down (see docs/docker.md).
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import socket
import tarfile
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from shipway.backends.docker import labels
from shipway.backends.protocol import LockHolder, Reporter, pid_alive
from shipway.errors import BackendError, LockLost, RecordError, SlotLocked
from shipway.release import codec
from shipway.release.model import Release

#: a record larger than this (compressed) is refused with a hint, not stored
RECORD_LIMIT = 512 * 1024
RENEWED_FILE = "lock-renewed"


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


# -- the lock -----------------------------------------------------------------------------


def _parse_time(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class SlotLock:
    """The lock of one slot: take, renew in a thread while held, release on every exit."""

    def __init__(
        self,
        client: docker.DockerClient,
        renew_client: docker.DockerClient,
        app: str,
        slot: str,
        host_name: str,
    ) -> None:
        self.client, self.renew_client = client, renew_client
        self.app, self.slot, self.host_name = app, slot, host_name
        self.name = labels.lock(app, slot)
        self._state = threading.Lock()
        #: why the lock is no longer ours (set by the renewal thread), None while it is
        self.lost: str | None = None
        #: time.monotonic() of the start of the last successful renewal (None: not held)
        self.renewed_at: float | None = None
        self.ttl = 60.0

    def _labels(self, holder: LockHolder) -> dict[str, str]:
        return {
            **labels.base(self.app, self.slot, labels.LOCK),
            labels.LOCK_HOLDER: holder.holder,
            labels.LOCK_HOST: holder.host,
            labels.LOCK_PID: str(holder.pid),
            labels.LOCK_SINCE: holder.since,
            labels.LOCK_TTL: str(holder.ttl),
        }

    def current(self) -> tuple[Container, dict[str, str], datetime | None] | None:
        """The lock container, its labels and when it was last renewed (None: free)."""
        try:
            container = self.client.containers.get(self.name)
        except docker.errors.NotFound:
            return None
        tags: dict[str, str] = container.labels
        renewed = read_tree(container, "/" + RENEWED_FILE).get(RENEWED_FILE)
        when = _parse_time(renewed[0].decode().strip()) if renewed else None
        return container, tags, when or _parse_time(tags.get(labels.LOCK_SINCE, ""))

    def _breakable(self, tags: dict[str, str], renewed: datetime | None) -> str | None:
        """Why the lock may be taken over (None: it may not)."""
        try:
            ttl = float(tags.get(labels.LOCK_TTL, "60"))
        except ValueError:
            ttl = 60.0
        now = datetime.now(UTC)
        if renewed is None or renewed + timedelta(seconds=ttl) <= now:
            return "it expired"
        if tags.get(labels.LOCK_HOST) == socket.gethostname():
            try:
                pid = int(tags.get(labels.LOCK_PID, ""))
            except ValueError:
                return None
            if pid != os.getpid() and not pid_alive(pid):
                return f"its process {pid} is gone from this machine"
        return None

    def _take(self, holder: LockHolder, reporter: Reporter) -> Container:
        ensure_holder_image(self.client)
        for _ in range(5):
            try:
                return self.client.containers.create(
                    labels.HOLDER_IMAGE, name=self.name, labels=self._labels(holder)
                )
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
            found = self.current()
            if found is None:
                continue  # released meanwhile: try again
            container, tags, renewed = found
            why = self._breakable(tags, renewed)
            who, since = tags.get(labels.LOCK_HOLDER, "?"), tags.get(labels.LOCK_SINCE, "?")
            if why is None:
                ttl = float(tags.get(labels.LOCK_TTL, "60") or 60)
                expires = (
                    (renewed + timedelta(seconds=ttl)).isoformat(timespec="seconds")
                    if (renewed)
                    else None
                )
                raise SlotLocked(
                    self.slot, f"{who} (lock on host {self.host_name})", since, expires
                )
            reporter.line(
                f"broke the lock of slot {self.slot!r} held by {who} since {since}: {why}"
            )
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.remove_container(str(container.id), force=True)
        raise BackendError(f"could not take the lock of slot {self.slot!r}: it kept changing hands")

    def _renew(self, container_id: str, holder: LockHolder) -> None:
        """Rewrite the renewal stamp, after checking the lock is still ours (raises
        :class:`LockLost` when it is gone or someone else's)."""
        try:
            found: dict[str, Any] = self.renew_client.api.inspect_container(self.name)
        except docker.errors.NotFound as exc:
            raise LockLost("its lock container was removed") from exc
        tags: dict[str, Any] = found["Config"]["Labels"] or {}
        if (
            str(found["Id"]) != container_id
            or tags.get(labels.LOCK_PID) != str(holder.pid)
            or tags.get(labels.LOCK_SINCE) != holder.since
        ):
            who = tags.get(labels.LOCK_HOLDER, "?")
            raise LockLost(f"it is now held by {who} since {tags.get(labels.LOCK_SINCE, '?')}")
        stamp = datetime.now(UTC).isoformat().encode()  # microseconds: no rounding down
        try:
            self.renew_client.api.put_archive(
                container_id, "/", tar_of({RENEWED_FILE: (stamp, 0o644)})
            )
        except docker.errors.NotFound as exc:
            raise LockLost("its lock container was removed") from exc

    def check(self) -> None:
        """Raise BackendError unless the lock is still ours and was renewed within its TTL
        (what every mutation under the lock checks first)."""
        with self._state:
            lost, renewed, ttl = self.lost, self.renewed_at, self.ttl
        if lost is None and renewed is not None and time.monotonic() - renewed > ttl:
            lost = (
                f"its last successful renewal was {time.monotonic() - renewed:.0f}s ago, "
                f"longer than its TTL ({ttl:g}s)"
            )
        if lost is not None:
            raise BackendError(
                f"the lock of slot {self.slot!r} (on host {self.host_name}) is no longer held: "
                f"{lost}; another operation may have taken over the slot, so shipway refuses "
                "to change anything more (check `shipway status`, then run again)"
            )

    @contextlib.contextmanager
    def held(self, holder: LockHolder, reporter: Reporter) -> Iterator[None]:
        # until the first renewal, others count the TTL from the holder's `since` label
        since = _parse_time(holder.since) or datetime.now(UTC)
        taken_at = time.monotonic() - max((datetime.now(UTC) - since).total_seconds(), 0.0)
        container = self._take(holder, reporter)
        container_id = str(container.id)
        stop = threading.Event()
        with self._state:
            self.lost, self.renewed_at, self.ttl = None, taken_at, holder.ttl

        def renew_once() -> None:
            started = time.monotonic()  # the stamp written is no earlier than this
            self._renew(container_id, holder)
            with self._state:
                self.renewed_at = started

        def renew_loop() -> None:
            interval = max(holder.ttl / 3, 0.5)
            failing = False
            while not stop.wait(interval):
                try:
                    renew_once()
                except LockLost as exc:
                    with self._state:
                        self.lost = str(exc)
                    reporter.line(f"warning: lost the lock of slot {self.slot!r}: {exc}")
                    return  # someone else's now: nothing left to renew
                except Exception as exc:  # the engine or the connection: retried next tick
                    if not failing:
                        reporter.line(
                            f"warning: could not renew the lock of slot {self.slot!r} "
                            f"(retrying every {interval:g}s): {exc}"
                        )
                    failing = True
                    continue
                if failing:
                    reporter.line(f"renewed the lock of slot {self.slot!r} again")
                failing = False

        thread = threading.Thread(target=renew_loop, name="shipway-lock-renewal", daemon=True)
        try:
            renew_once()
            thread.start()
            yield
        finally:
            stop.set()
            if thread.is_alive():
                thread.join(timeout=10)
            self._release(container_id, holder)

    def _release(self, container_id: str, holder: LockHolder) -> None:
        try:
            tags: dict[str, Any] = (
                self.client.api.inspect_container(container_id)["Config"]["Labels"] or {}
            )
        except docker.errors.NotFound:
            return  # broken by someone after it expired: nothing of ours to release
        if (
            tags.get(labels.LOCK_PID) == str(holder.pid)
            and tags.get(labels.LOCK_SINCE) == holder.since
        ):
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.remove_container(container_id, force=True)
