"""A Docker slot's freeze (backends/freezes.py), kept on the slot's first host as the
records are (:mod:`.records`): a holder container, created and never started, whose label
holds the freeze as JSON. Creating a container is atomic, so a freeze is wholly written or
not at all; a new one is created before the older ones are removed, and readers take the
newest."""

from __future__ import annotations

import contextlib
import time

import docker.errors

from shipway.backends.docker import labels
from shipway.backends.docker.edge import edge
from shipway.backends.docker.records import holder_made
from shipway.backends.docker.state import DockerState
from shipway.backends.freezes import decode_freeze, encode_freeze
from shipway.guard import Clearance
from shipway.spec.freeze import Freeze
from shipway.spec.model import Target

FREEZE_KIND = "freeze"


class DockerFreezes(DockerState):
    def _freeze_containers(self) -> list[tuple[int, str, str]]:
        """(sequence, id, freeze JSON) of the slot's freeze containers, oldest first."""
        client = self._client(self.primary)
        filters = labels.slot_filter(self.app.name, self.slot.name, FREEZE_KIND)
        found = client.containers.list(all=True, sparse=True, filters=filters)
        out = []
        for c in found:
            tags: dict[str, str] = c.attrs.get("Labels") or {}
            with contextlib.suppress(ValueError):
                out.append(
                    (int(tags.get(labels.SEQUENCE, "0")), str(c.id), tags.get(labels.RECORD, ""))
                )
        return sorted(out)

    def read_freeze(self, target: Target) -> Freeze | None:
        self._serves(target)
        with edge(f"host {self.primary}: read the freeze"):
            found = self._freeze_containers()
        if not found:
            return None
        return decode_freeze(found[-1][2], f"host {self.primary}")

    def write_freeze(self, clearance: Clearance, target: Target, freeze: Freeze | None) -> None:
        self._guard(clearance, target)
        client = self._client(self.primary)
        with edge(f"host {self.primary}: write the freeze"):
            older = self._freeze_containers()
            if freeze is not None:
                seq = max([time.time_ns(), *(s + 1 for s, _, _ in older)])
                tags = {
                    **labels.base(self.app.name, self.slot.name, FREEZE_KIND),
                    labels.SEQUENCE: str(seq),
                    labels.RECORD: encode_freeze(freeze),
                }
                name = f"{labels.prefix(self.app.name, self.slot.name)}-freeze-{seq}"
                holder_made(
                    client,
                    lambda: client.api.create_container(
                        labels.HOLDER_IMAGE, name=name, labels=tags
                    ),
                )
            for _, cid, _ in older:
                with contextlib.suppress(docker.errors.NotFound):
                    client.api.remove_container(cid, force=True)
