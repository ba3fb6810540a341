"""The app's images on the slot's hosts: what a rollback needs stays, the rest goes.

Every deploy pulls (or builds) a new image onto the hosts; nothing else ever removes the
old ones. So after a successful deploy, on each host of the slot, shipway removes the
images of this app that no release within ``history_limit`` needs, and says what it freed;
``destroy`` removes the images of the slot's releases that nothing else on the host needs.

Which images are this app's — never another app's:

* after a deploy: those shipway built (its build label, which a pulled copy keeps) whose
  every reference (``RepoTags``, ``RepoDigests``) is in the repository the app's ``image``
  names (where shipway pushes what it builds), and those the release records dropped just
  now name (by digest or tag);
* on destroy: those the slot's release records name, and those its containers ran.

What stays, whatever else is true: an image a kept release record of the slot names, an
image any container on the host was created from (any app's, running or not), an image any
other release record on the host names (another slot's or another app's), and every image
of a repository another app (or a container shipway did not make) uses on the host: a
repository two apps share is neither's to prune. An image is
removed without force, so one the engine still needs (a child image, a container created
meanwhile) is refused by the engine and kept; that is said, never an error. A failure to
prune is reported as a warning and never turns a successful deploy into a failure
(invariant 7).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors

from shipway.backends.docker import labels
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.edge import edge
from shipway.backends.docker.steps import DockerSteps
from shipway.backends.imagebuild import INPUTS_LABEL
from shipway.backends.imagemeta import ImageRef
from shipway.errors import BackendError, ShipwayError
from shipway.guard import Clearance
from shipway.release import codec
from shipway.release.model import Release
from shipway.spec.model import Target


def _name(ref: str) -> str:
    """The normalised repository of a reference (``RepoTags`` / ``RepoDigests`` form)."""
    try:
        return ImageRef.parse(ref).name
    except ValueError:
        return ref.split("@", 1)[0].rsplit(":", 1)[0]


def _tag(ref: str) -> str | None:
    """``registry/repository:tag`` of a tagged reference, normalised; else None."""
    try:
        parsed = ImageRef.parse(ref)
    except ValueError:
        return None
    return f"{parsed.name}:{parsed.tag}" if parsed.tag and not parsed.digest else None


@dataclass(frozen=True)
class HostImage:
    """One image on a host, as the one list call gives it."""

    id: str
    tags: tuple[str, ...]  #: normalised ``registry/repository:tag``
    digests: tuple[str, ...]  #: ``sha256:…`` of its repo digests
    repositories: frozenset[str]
    size: int
    built: bool = False  #: shipway built it (its build label; a pull of it keeps that)

    @classmethod
    def of(cls, raw: dict[str, Any]) -> HostImage:
        tags = [t for t in raw.get("RepoTags") or [] if t and t != "<none>:<none>"]
        digests = [d for d in raw.get("RepoDigests") or [] if d and not d.startswith("<none>")]
        return cls(
            id=str(raw.get("Id") or ""),
            tags=tuple(t for t in (_tag(t) for t in tags) if t),
            digests=tuple(d.partition("@")[2] for d in digests),
            repositories=frozenset(_name(r) for r in [*tags, *digests]),
            size=int(raw.get("Size") or 0),
            built=INPUTS_LABEL in (raw.get("Labels") or {}),
        )

    def named_by(self, release: Release) -> bool:
        """Whether ``release`` ran this image (its digest, else its tag)."""
        if release.digest and release.digest in self.digests:
            return True
        for ref in (release.image, release.image_ref()):
            if ref and "@" in ref and ref.partition("@")[2] in self.digests:
                return True
            tagged = _tag(ref) if ref else None
            if tagged and tagged in self.tags:
                return True
        return False


def size_text(size: int) -> str:
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= factor:
            return f"{size / factor:.1f} {unit}"
    return f"{size} B"


@dataclass
class Removed:
    """What one host's pruning did."""

    count: int = 0
    size: int = 0
    kept_busy: int = 0
    refs: list[str] = field(default_factory=list)  #: a name of each image removed

    def text(self) -> str:
        what = f"{self.count} image{'' if self.count == 1 else 's'}"
        freed = f" (up to {size_text(self.size)} freed; layers shared with kept images stay)"
        them = "it" if self.kept_busy == 1 else "them"
        busy = f"; {self.kept_busy} kept: the engine still needs {them}" if self.kept_busy else ""
        return what + (freed if self.count else "") + busy


class DockerImages(DockerSteps):
    """prune_images (after a successful deploy) and the images part of destroy."""

    # -- what is on a host ---------------------------------------------------------------

    @staticmethod
    def _host_images(client: docker.DockerClient) -> list[HostImage]:
        return [HostImage.of(raw) for raw in client.api.images()]

    def _protected(
        self, client: docker.DockerClient, images: Sequence[HostImage], this_slot_too: bool
    ) -> set[str]:
        """Ids of what must stay on a host whatever this slot's records say: images any
        container was created from (records and locks use the holder image), images any
        other release record on the host names, and every image of a repository that
        another app (or a container shipway did not make) uses on the host — a repository
        two apps share is neither's to prune. ``images``: the host's, listed once by the
        caller (a list costs the engine a walk of every image it has)."""
        in_use: set[str] = set()
        others: set[str] = set()  #: what another app (or another tool) runs or names
        same_app: list[Release] = []
        other_app: list[Release] = []
        for c in client.api.containers(all=True):
            tags = c.get("Labels") or {}
            mine = tags.get(labels.APP) == self.app.name
            if tags.get(labels.KIND) == labels.RECORD_KIND:
                if mine and tags.get(labels.SLOT) == self.slot.name and not this_slot_too:
                    continue
                with contextlib.suppress(ValueError, ShipwayError):
                    blob = base64.b64decode(tags.get(labels.RECORD, ""), validate=True)
                    (same_app if mine else other_app).append(codec.decode(blob))
                continue
            if c.get("ImageID"):
                (in_use if mine else others).add(str(c["ImageID"]))
        for image in images:
            if any(image.named_by(r) for r in other_app):
                others.add(image.id)
            elif any(image.named_by(r) for r in same_app):
                in_use.add(image.id)
        shared: set[str] = set()
        for image in images:
            if image.id in others:
                shared |= image.repositories
        return in_use | others | {i.id for i in images if i.repositories & shared}

    @staticmethod
    def _remove_images(client: docker.DockerClient, images: Iterable[HostImage]) -> Removed:
        done = Removed()
        for image in images:
            try:
                client.api.remove_image(image.id, force=False, noprune=False)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # a child image, a container made meanwhile
                    done.kept_busy += 1
                    continue
                raise
            done.count += 1
            done.size += image.size
            done.refs.append(image.tags[0] if image.tags else image.id[:19])
        return done

    # -- after a deploy --------------------------------------------------------------------

    def prune_images(
        self,
        clearance: Clearance,
        target: Target,
        keep: Sequence[Release],
        dropped: Sequence[Release],
    ) -> tuple[list[str], list[str]]:
        """Remove, on each host, this app's images no kept release needs. Returns the lines
        saying what was freed, and the problems (one per host that could not be pruned)."""
        self._guard(clearance, target)
        ours = {_name(self.app.image)} if self.app.image else set()
        limit = self.slot.history_limit

        def on_host(conn: HostConnection) -> tuple[str | None, str | None]:
            """(what was freed, what went wrong) on one host; None: nothing to say."""
            try:
                with edge(f"host {conn.name}: prune old images"):
                    client = conn.client()
                    images = self._host_images(client)
                    needed = {i.id for i in images if any(i.named_by(r) for r in keep)}
                    candidates = [
                        i
                        for i in images
                        if i.id not in needed
                        and (
                            (i.built and i.repositories and i.repositories <= ours)
                            or any(i.named_by(r) for r in dropped)
                        )
                    ]
                    if not candidates:
                        return None, None
                    protected = self._protected(client, images, this_slot_too=False)
                    done = self._remove_images(
                        client, [i for i in candidates if i.id not in protected]
                    )
            except BackendError as exc:
                return None, f"pruning old images failed: {exc}"
            if not done.count and not done.kept_busy:
                return None, None
            self._note(conn.name, f"removed {done.count} old images")
            return (
                f"host {conn.name}: removed {done.text()} of {self.app.name} that no release "
                f"within history_limit ({limit}) needs"
            ), None

        found = self._each_host(on_host).values()
        return [s for s, _ in found if s], [p for _, p in found if p]

    # -- destroy ---------------------------------------------------------------------------

    def _slot_images(self, client: docker.DockerClient, records: Sequence[Release]) -> set[str]:
        """Ids of the images the slot's records name and its containers ran (read before
        anything of the slot is removed)."""
        found = {i.id for i in self._host_images(client) if any(i.named_by(r) for r in records)}
        for c in client.api.containers(
            all=True, filters=labels.slot_filter(self.app.name, self.slot.name)
        ):
            tags = c.get("Labels") or {}
            if tags.get(labels.KIND) in (labels.APP_CONTAINER, labels.RELEASE_COMMAND) and c.get(
                "ImageID"
            ):
                found.add(str(c["ImageID"]))
        return found

    def _destroy_images(self, client: docker.DockerClient, slot_images: set[str]) -> Removed:
        """After the slot's containers and records are gone: its images that nothing else
        on the host needs (another slot's containers or records)."""
        if not slot_images:
            return Removed()
        images = self._host_images(client)
        protected = self._protected(client, images, this_slot_too=True)
        return self._remove_images(client, [i for i in images if i.id in slot_images - protected])
