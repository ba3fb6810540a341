"""``destroy`` on the Docker hosts: every container, volume and network labelled as the
slot's, on every host — the app's containers first, its release records last, so a destroy
cut short leaves records that still name what is left; the lock goes when it is released.
The data volumes (the app's, its accessories') stay unless asked; an accessory's
container goes after the app's. The images the slot's releases ran go too, unless
another slot (or app) on the host still uses them (:mod:`.images`).

Its routes leave the host's shared proxies first (the other slots' routes there stay, and
keep answering); a shared proxy no other slot uses goes with the last slot's destroy.

What must never happen: another app's or slot's object removed (everything is found by the
slot's labels), or a data volume removed without ``volumes``. The slot's freeze holder
stays, as every backend keeps a freeze through a destroy (docs/events.md).
"""

from __future__ import annotations

import contextlib

import docker
import docker.errors
from docker.models.volumes import Volume

from shipway.backends.docker import labels
from shipway.backends.docker.accessories import DockerAccessories
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.containers import remove
from shipway.backends.docker.edge import edge
from shipway.backends.docker.freezes import FREEZE_KIND
from shipway.backends.docker.images import DockerImages
from shipway.backends.docker.state import name_of
from shipway.backends.protocol import Leftover, Reporter
from shipway.guard import Clearance
from shipway.spec.model import Target

#: container kind -> what destroy calls it, in the order it removes them
_KINDS = {
    labels.APP_CONTAINER: "container",
    labels.RELEASE_COMMAND: "release command",
    labels.ACCESSORY: "accessory",
    labels.PROXY: "proxy",
    labels.FILES: "files holder",
    labels.RECORD_KIND: "release record",
}


class DockerDestroy(DockerImages, DockerAccessories):
    """The protocol's Destroys."""

    def leftovers(self, target: Target) -> list[Leftover]:
        self._serves(target)
        found = self._each_host(self._leftovers_on)
        return [item for host in self.host_addresses for item in found[host.name]]

    def _leftovers_on(self, conn: HostConnection) -> list[Leftover]:
        with edge(f"host {conn.name}: list what shipway made"):
            client = conn.client()
            out = [
                Leftover(_KINDS.get(kind, kind), f"{name} on {conn.name}")
                for kind, name in self._containers_in_order(client)
            ]
            out += [
                Leftover("volume", f"{v.name} on {conn.name} (config)")
                for v in self._slot_volumes(client)
                if (v.attrs.get("Labels") or {}).get(labels.KIND) not in labels.DATA_KINDS
            ]
            out += self._shared_leftovers(client, conn.name)
            out += [
                Leftover("network", f"{n.name} on {conn.name}")
                for n in client.networks.list(names=[labels.network(self.app.name, self.slot.name)])
            ]
            return (
                out
                + self._volume_leftovers(client, conn.name)
                + self._accessory_leftovers(client, conn.name)
            )

    def _shared_leftovers(self, client: docker.DockerClient, host: str) -> list[Leftover]:
        """This slot's routes in the host's shared proxies, and a shared proxy only this
        slot uses (it goes with them)."""
        out = []
        for proxy in self._shared_proxies(client):
            parts = self._looked_parts(client, host, str(proxy.id)) or {}
            if self._owner not in parts:
                continue
            name = name_of(proxy)
            if len(parts) == 1:
                out.append(Leftover("proxy", f"{name} on {host} (no other slot uses it)"))
            else:
                n = len(parts[self._owner])
                out.append(Leftover("routes", f"{n} in shared proxy {name} on {host}"))
        return out

    def _containers_in_order(self, client: docker.DockerClient) -> list[tuple[str, str]]:
        """(kind, name) of the slot's containers but its lock and its freeze (a freeze
        outlives a destroy: docs/events.md), in removal order."""
        order = list(_KINDS)
        found = [
            (str(c.labels.get(labels.KIND)), str(c.name))
            for c in self._labelled(client)
            if c.labels.get(labels.KIND) not in (labels.LOCK, FREEZE_KIND)
        ]
        return sorted(found, key=lambda kn: (order.index(kn[0]) if kn[0] in order else 0, kn[1]))

    def _slot_volumes(self, client: docker.DockerClient) -> list[Volume]:
        found: list[Volume] = client.volumes.list(
            filters=labels.slot_filter(self.app.name, self.slot.name)
        )
        return found

    def destroy(
        self, clearance: Clearance, target: Target, volumes: bool, reporter: Reporter
    ) -> list[Leftover]:
        self._guard(clearance, target)
        found = self.leftovers(target)
        with self._records("read") as store:  # the images they name go too (.images)
            records = store.read()
        images: dict[str, list[Leftover]] = {}

        def on_host(conn: HostConnection) -> str:
            removed = 0
            with edge(f"host {conn.name}: destroy"):
                client = conn.client()
                slot_images = self._slot_images(client, records)
                # its routes out of the shared proxies (the proxy too, if no other slot
                # uses it): other apps' routes there stay as they are
                left = self._leave_proxies(client, conn.name)
                removed += len(left)
                for _, name in self._containers_in_order(client):
                    with contextlib.suppress(docker.errors.NotFound):
                        remove(client.containers.get(name), 10)
                        removed += 1
                for v in self._slot_volumes(client):
                    data = (v.attrs.get("Labels") or {}).get(labels.KIND) in labels.DATA_KINDS
                    if not data or volumes:
                        with contextlib.suppress(docker.errors.NotFound):
                            v.remove(force=True)
                            removed += 1
                network = labels.network(self.app.name, self.slot.name)
                for n in client.networks.list(names=[network]):
                    with contextlib.suppress(docker.errors.NotFound):
                        n.remove()
                        removed += 1
            with edge(f"host {conn.name}: destroy the slot's images"):
                done = self._destroy_images(client, slot_images)
            images[conn.name] = [Leftover("image", f"{ref} on {conn.name}") for ref in done.refs]
            return f"deleted {removed} objects" + (
                f"; removed {done.text()} no other slot uses"
                if done.count or done.kept_busy
                else ""
            )

        self._guard(clearance, target)  # the lock still ours before anything goes
        for host, line in self._each_host(on_host).items():
            reporter.line(f"host {host}: {line}")
        gone = [item for item in found if volumes or not item.data]
        return gone + [item for host in self.host_addresses for item in images.get(host.name, [])]
