"""A Kubernetes slot's freeze (backends/freezes.py): a ConfigMap in the slot's namespace,
``shipway.freeze.v1.<app>``, labelled ``owner=shipway``, ``name=<app>``, its one data key
``freeze`` the freeze as JSON. A freeze is no secret, so it is no Secret: anyone who may
read the namespace sees why it is frozen. Applied server-side (wholly written or not at
all); ``unfreeze`` deletes it."""

from __future__ import annotations

from typing import Any

from shipway.backends.freezes import decode_freeze, encode_freeze
from shipway.backends.kubernetes.records import OWNER
from shipway.backends.kubernetes.state import KubernetesState
from shipway.guard import Clearance
from shipway.spec.freeze import Freeze
from shipway.spec.model import Target

DATA_KEY = "freeze"


def freeze_name(app: str) -> str:
    return f"shipway.freeze.v1.{app}"


class KubernetesFreezes(KubernetesState):
    def read_freeze(self, target: Target) -> Freeze | None:
        from lightkube.core.exceptions import ApiError
        from lightkube.resources.core_v1 import ConfigMap

        self._serves(target)
        name = freeze_name(self.app.name)
        with self._edge(f"read the freeze {self.namespace}/{name}"):
            try:
                found: Any = self.client.get(ConfigMap, name, namespace=self.namespace)
            except ApiError as exc:
                if exc.status.code == 404:
                    return None
                raise
        text = (found.data or {}).get(DATA_KEY)
        return decode_freeze(text, f"{self.namespace}/{name}") if text else None

    def write_freeze(self, clearance: Clearance, target: Target, freeze: Freeze | None) -> None:
        from lightkube.codecs import from_dict
        from lightkube.core.exceptions import ApiError
        from lightkube.resources.core_v1 import ConfigMap

        self._guard(clearance, target)
        name = freeze_name(self.app.name)
        with self._edge(f"write the freeze {self.namespace}/{name}"):
            if freeze is None:
                try:
                    self.client.delete(ConfigMap, name, namespace=self.namespace)
                except ApiError as exc:
                    if exc.status.code != 404:
                        raise
                return
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": {"owner": OWNER, "name": self.app.name},
                },
                "data": {DATA_KEY: encode_freeze(freeze)},
            }
            self.client.apply(from_dict(body), force=True)
