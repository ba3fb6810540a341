"""Who serves a host name on the slot's Docker hosts: the protocol's host part.

Each Docker host has a shared proxy per port (every app's and slot's routes in it, each
slot's part of ``slots.json`` naming the host names it answers for; a per-slot proxy of
before has its ``routes.json``). Another app or slot whose routes in a proxy on one of this
slot's Docker hosts name a host is that host's owner: the engine refuses to deploy a slot
that declares it too, unless told to take it (``--take-host``). Read-only.

Taking a host on Docker changes nothing of the other slot's routes: they stay as they are
(in the same shared proxy, the routes of the slot first in the order of ``app/slot`` answer
the name), until that slot stops routing it.
The owner's description says where it answers, so the line that says a host is taken
says that too. Once this slot's own proxy routes the host, it is this slot's as well: it
is not asked again.
"""

from __future__ import annotations

import docker
from docker.models.containers import Container

from shipway.backends.docker import caddy, drift, labels
from shipway.backends.docker.edge import edge
from shipway.backends.docker.records import read_tree_of
from shipway.backends.docker.state import DockerState, name_of, tags_of
from shipway.backends.protocol import HostOwner
from shipway.spec.model import App, Slot, Target


class DockerOwners(DockerState):
    """``hosts`` and ``host_owner``."""

    def hosts(self, app: App, slot: Slot) -> list[tuple[str, str]]:
        return [(r.host, r.process) for r in app.routes]

    def host_owner(self, target: Target, host: str) -> HostOwner | None:
        """The first other app or slot, in a proxy on this slot's hosts in order, whose
        routes name ``host`` — unless this slot's own routes name it already (it serves
        the host: a redeploy, or a host it was told to take)."""
        self._serves(target)
        wanted = host.lower()
        mine = (self.app.name, self.slot.name)
        found: HostOwner | None = None
        for address in self.host_addresses:
            client = self._client(address.name)
            with edge(f"host {address.name}: looking up who serves {host}"):
                # as the list gives them (one gone meanwhile has no files, and no owner)
                proxies = client.containers.list(
                    all=True, filters={"label": [f"{labels.KIND}={labels.PROXY}"]}, sparse=True
                )
                for proxy in proxies:
                    owners = _served(client, proxy).get(wanted, [])
                    if mine in owners:
                        return None
                    if owners and found is None:
                        body, _ = drift.body_of(tags_of(proxy))
                        port = (body or {}).get("port")
                        found = HostOwner(
                            app=owners[0][0] or "?",
                            slot=owners[0][1] or "?",
                            where=f"proxy {name_of(proxy)} on {address.name}"
                            + (f", port {port}" if port else ""),
                        )
        return found


def _served(client: docker.DockerClient, proxy: Container) -> dict[str, list[tuple[str, str]]]:
    """The host names a proxy's routes answer for (lowercased), each with the (app, slot)
    whose routes they are: every slot's part of a shared proxy, or a per-slot proxy's own
    (of before the shared one)."""
    tree = read_tree_of(client, str(proxy.id), caddy.CONFIG_DIR)
    tags = tags_of(proxy)
    if labels.SHARED_PORT in tags:
        parts = {
            tuple(owner.split("/", 1)): routes for owner, routes in caddy.parse_parts(tree).items()
        }
    else:
        parts = {(tags.get(labels.APP, ""), tags.get(labels.SLOT, "")): caddy.parse_routes(tree)}
    out: dict[str, list[tuple[str, str]]] = {}
    for (app, *slot), routes in parts.items():
        for fragment in routes.values():
            for h in (fragment.get("body") or {}).get("hosts") or []:
                out.setdefault(str(h).lower(), []).append((app, slot[0] if slot else ""))
    return out
