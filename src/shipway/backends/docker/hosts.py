"""Who serves a host name on the slot's Docker hosts: the protocol's host part.

Each slot has its own proxy per Docker host, and its routes (``routes.json`` in the proxy's
volume) name the host names it answers for. Another app's or slot's proxy on one of this
slot's Docker hosts whose routes name a host is that host's owner: the engine refuses to
deploy a slot that declares it too, unless told to take it (``--take-host``). Read-only.

Taking a host on Docker changes nothing of the other slot: its proxy listens on its own
port and keeps answering for the host there until that slot stops routing it; which port
the host name's traffic reaches is the load balancer's (or DNS's) choice, not shipway's.
The owner's description says where it answers, so the line that says a host is taken
says that too. Once this slot's own proxy routes the host, it is this slot's as well: it
is not asked again.
"""

from __future__ import annotations

from docker.models.containers import Container

from shipway.backends.docker import caddy, drift, labels
from shipway.backends.docker.edge import edge
from shipway.backends.docker.records import read_tree
from shipway.backends.docker.state import DockerState
from shipway.backends.protocol import HostOwner
from shipway.spec.model import App, Slot, Target


class DockerOwners(DockerState):
    """``hosts`` and ``host_owner``."""

    def hosts(self, app: App, slot: Slot) -> list[tuple[str, str]]:
        return [(r.host, r.process) for r in app.routes]

    def host_owner(self, target: Target, host: str) -> HostOwner | None:
        """The first other app's or slot's proxy, on this slot's hosts in order, whose
        routes name ``host`` — unless this slot's own proxies route it already (it serves
        the host: a redeploy, or a host it was told to take)."""
        self._serves(target)
        wanted = host.lower()
        found: HostOwner | None = None
        for address in self.host_addresses:
            client = self._client(address.name)
            with edge(f"host {address.name}: looking up who serves {host}"):
                proxies = client.containers.list(
                    all=True, filters={"label": [f"{labels.KIND}={labels.PROXY}"]}
                )
                for proxy in proxies:
                    tags = proxy.labels
                    if wanted not in _served(proxy):
                        continue
                    owner = (tags.get(labels.APP, ""), tags.get(labels.SLOT, ""))
                    if owner == (self.app.name, self.slot.name):
                        return None
                    if found is None:
                        body, _ = drift.body_of(tags)
                        port = (body or {}).get("port")
                        found = HostOwner(
                            app=owner[0] or "?",
                            slot=owner[1] or "?",
                            where=f"proxy {proxy.name} on {address.name}"
                            + (f", port {port}" if port else ""),
                        )
        return found


def _served(proxy: Container) -> set[str]:
    """The host names a proxy's routes answer for (lowercased)."""
    routes = caddy.parse_routes(read_tree(proxy, caddy.CONFIG_DIR))
    return {
        str(h).lower()
        for fragment in routes.values()
        for h in (fragment.get("body") or {}).get("hosts") or []
    }
