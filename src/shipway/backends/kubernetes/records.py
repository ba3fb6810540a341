"""Release records in the cluster: one Secret per revision, like Helm's, but named and
typed as shipway's own so neither tool mistakes the other's records.

* name ``shipway.release.v1.<app>.v<N>``, type ``shipway.io/release.v1``;
* labels ``owner=shipway``, ``name=<app>``, ``status=<status>``, ``version=<N>`` (history is a
  label query, like Helm's);
* one data key, ``release``: the record as gzip-compressed JSON (:mod:`shipway.release.codec`);
* a record that would not fit in a Secret (1 MiB of data) is refused before anything is
  written, with the hint to shrink what makes it big.

The namespace is the slot's, and a spec may not give two slots of one app the same
namespace, so the app name alone identifies the records of one slot.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shipway.release import codec
from shipway.release.model import Release

if TYPE_CHECKING:
    from lightkube import Client

RECORD_TYPE = "shipway.io/release.v1"
OWNER = "shipway"
DATA_KEY = "release"
# The API server refuses a Secret whose data adds up to more than 1 MiB.
SECRET_LIMIT = 1024 * 1024


def record_name(app: str, revision: int) -> str:
    return f"shipway.release.v1.{app}.v{revision}"


def record_labels(release: Release) -> dict[str, str]:
    return {
        "owner": OWNER,
        "name": release.app,
        "status": str(release.status),
        "version": str(release.revision),
    }


def history_labels(app: str) -> dict[str, str]:
    return {"owner": OWNER, "name": app}


def record_body(release: Release, namespace: str) -> dict[str, Any]:
    """The Secret holding ``release``; raises RecordError when it would be too big."""
    blob = codec.encode(release, limit=SECRET_LIMIT)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": record_name(release.app, release.revision),
            "namespace": namespace,
            "labels": record_labels(release),
        },
        "type": RECORD_TYPE,
        "data": {DATA_KEY: base64.b64encode(blob).decode()},
    }


def decode_record(secret: Any) -> Release:
    """A record Secret (as lightkube returns it: data already base64 text) → Release."""
    data = secret.data or {}
    return codec.decode(base64.b64decode(data.get(DATA_KEY, "")))


class RecordStore:
    """The records of one app in one namespace."""

    def __init__(self, client: Client, namespace: str, app: str) -> None:
        self.client = client
        self.namespace = namespace
        self.app = app

    def read(self) -> list[Release]:
        from lightkube.resources.core_v1 import Secret

        client: Any = self.client
        found = client.list(Secret, namespace=self.namespace, labels=history_labels(self.app))
        records = [decode_record(s) for s in found if s.type == RECORD_TYPE]
        return sorted(records, key=lambda r: r.revision)

    def write(self, records: Sequence[Release]) -> None:
        from lightkube.codecs import from_dict

        # Encode every record first: a refused one must not leave the others half-written.
        bodies = [record_body(r, self.namespace) for r in records]
        for body in bodies:
            self.client.apply(from_dict(body), force=True)

    def delete(self, revisions: Sequence[int]) -> None:
        from lightkube.core.exceptions import ApiError
        from lightkube.resources.core_v1 import Secret

        for revision in revisions:
            try:
                self.client.delete(
                    Secret, record_name(self.app, revision), namespace=self.namespace
                )
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
