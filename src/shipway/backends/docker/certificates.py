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
        trees: dict[tuple[str, str, str], dict[str, tuple[bytes, int]]] = {}
        for unit in secure:
            out += self._kept_on(unit, secure, trees)
        return out

    def _kept_on(
        self,
        unit: Unit,
        secure: list[Unit],
        trees: dict[tuple[str, str, str], dict[str, tuple[bytes, int]]],
    ) -> list[CertificateStatus]:
        """The certificates the proxy of the unit's host keeps for it (``trees``: the
        proxy's directories read so far, each read once for all the routes it serves)."""
        tls, host = unit.body["tls"], unit.host or self.primary
        proxy = str(unit.body.get("proxy") or labels.shared_proxy(self.settings.proxy_port))
        out = []
        with edge(f"host {host}: read certificates"):
            client = self._client(host)

            def tree_of(path: str) -> dict[str, tuple[bytes, int]]:
                if (host, proxy, path) not in trees:
                    trees[(host, proxy, path)] = read_tree_of(client, proxy, path)
                return trees[(host, proxy, path)]

            if tls.get("given"):
                tree = tree_of(caddy.CONFIG_DIR)
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
                storage = tree_of(https.STORAGE)
                directory = tls["acme"]["directory"]
                served = tuple(
                    u.host or "" for u in secure if set(tls["auto"]) & set(u.body["tls"]["auto"])
                )
                for name in tls["auto"]:
                    path = https.storage_key(directory, name, "crt")
                    if path in storage:
                        out.append(of_pem(storage[path][0], "acme", host, served))
        return out
