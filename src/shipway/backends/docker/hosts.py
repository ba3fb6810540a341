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
from shipway.backends.docker.containers import half_removed
from shipway.backends.docker.edge import edge
from shipway.backends.docker.records import read_tree_of
from shipway.backends.docker.state import DockerState, name_of, tags_of
from shipway.backends.protocol import HostOwner
from shipway.spec.model import App, Slot, Target

#: the host names a proxy's routes answer for, each with the (app, slot) whose routes they are
Served = dict[str, list[tuple[str, str]]]


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
        listed: dict[str, list[Container]] = {}
        seen: dict[str, Served] = {}
        # where a redeploy finds its own routes: its own port's shared proxy on the first
        # host, read first (then no other proxy is); the answer is the same either way
        first, own = self.host_addresses[0].name, labels.shared_proxy(self.settings.proxy_port)
        for proxy in self._proxies_on(first, host, listed):
            if name_of(proxy) != own:
                continue
            if mine in self._served_by(first, proxy, host, seen).get(wanted, []):
                return None
        found: HostOwner | None = None
        for address in self.host_addresses:
            for proxy in self._proxies_on(address.name, host, listed):
                owners = self._served_by(address.name, proxy, host, seen).get(wanted, [])
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

    def _proxies_on(
        self, host: str, looked_up: str, listed: dict[str, list[Container]]
    ) -> list[Container]:
        """Every proxy on Docker host ``host``, as the list gives them (one gone meanwhile
        has no files, and no owner; one the engine left half removed serves nothing and is
        passed by); listed once per look-up of a host name (``listed``)."""
        if host not in listed:
            client = self._client(host)
            with edge(f"host {host}: looking up who serves {looked_up}"):
                found = client.containers.list(
                    all=True, filters={"label": [f"{labels.KIND}={labels.PROXY}"]}, sparse=True
                )
                listed[host] = [c for c in found if not half_removed(c)]
        return listed[host]

    def _served_by(
        self, host: str, proxy: Container, looked_up: str, seen: dict[str, Served]
    ) -> Served:
        """:func:`_served` of a proxy, read once per look-up (``seen``), or, while the slot's
        lock is held, once until a step of this backend changes something (its plan asks
        for each host name in turn)."""
        kept = self._served_names if self._slot_lock is not None else seen
        key = f"{host} {proxy.id}"
        if key not in kept:
            with edge(f"host {host}: looking up who serves {looked_up}"):
                kept[key] = _served(self._client(host), proxy)
        return kept[key]


def _served(client: docker.DockerClient, proxy: Container) -> Served:
    """The host names a proxy's routes answer for (lowercased), each with the (app, slot)
    whose routes they are: every slot's part of a shared proxy, or a per-slot proxy's own
    (of before the shared one). Only the file that names them is read, not the whole
    config directory (its config, certificates and upstream files)."""
    tags = tags_of(proxy)
    shared = labels.SHARED_PORT in tags
    path = f"{caddy.CONFIG_DIR}/{caddy.PARTS_FILE if shared else caddy.ROUTES_FILE}"
    tree = read_tree_of(client, str(proxy.id), path)
    if shared:
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
