"""The certificates a slot's routes are served with (``status``): read from the proxies'
storage on the hosts, never from a handshake, and never their keys.

A ``tls = "auto"`` certificate is kept by the issuer's proxy only (Caddy's storage in its
data volume, :mod:`.https`); the other hosts serve that one. A given certificate is a file
in each host's proxy config volume.
"""

from __future__ import annotations

from shipway.backends.certificate_status import CertificateStatus, of_pem
from shipway.backends.docker import caddy, https, labels
from shipway.backends.docker.edge import edge
from shipway.backends.docker.records import read_tree_of
from shipway.backends.docker.state import DockerState
from shipway.release import history
from shipway.release.artifact import Unit
from shipway.spec.model import Target


class DockerCertificates(DockerState):
    """certificates (status)."""

    def certificates(self, target: Target) -> list[CertificateStatus]:
        self._serves(target)
        with self._records("read") as store:
            deployed = history.deployed(store.read())
        if deployed is None:
            return []
        secure = [u for u in deployed.artifact if u.kind == "route" and u.body.get("tls")]
        out: list[CertificateStatus] = []
        for unit in secure:
            out += self._kept_on(unit, secure)
        return out

    def _kept_on(self, unit: Unit, secure: list[Unit]) -> list[CertificateStatus]:
        """The certificates the proxy of the unit's host keeps for it."""
        tls, host = unit.body["tls"], unit.host or self.primary
        proxy = str(unit.body.get("proxy") or labels.shared_proxy(self.settings.proxy_port))
        out = []
        with edge(f"host {host}: read certificates"):
            client = self._client(host)
            if tls.get("given"):
                tree = read_tree_of(client, proxy, caddy.CONFIG_DIR)
                for i in range(len(tls["given"])):
                    name = (
                        https.file_of(
                            f"{labels.owner(self.app.name, self.slot.name)} {unit.key} {i}", ""
                        )
                        + "crt"
                    )
                    if name in tree:
                        out.append(of_pem(tree[name][0], "secrets", host, (host,)))
            if tls.get("auto") and not tls.get("from"):
                storage = read_tree_of(client, proxy, https.STORAGE)
                directory = tls["acme"]["directory"]
                served = tuple(
                    u.host or "" for u in secure if set(tls["auto"]) & set(u.body["tls"]["auto"])
                )
                for name in tls["auto"]:
                    path = https.storage_key(directory, name, "crt")
                    if path in storage:
                        out.append(of_pem(storage[path][0], "acme", host, served))
        return out
