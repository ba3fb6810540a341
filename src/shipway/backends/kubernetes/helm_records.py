"""What ``--take-over`` does to the records of a Helm release whose objects a source takes.

Removing Helm's ownership marks from an object is not enough: ``helm uninstall`` deletes
what the *last* revision's manifest lists (whatever its status, and whatever the objects'
annotations say), and ``helm list`` shows the release as long as that revision is
``deployed``. So, as the slot's source chooses (``helm_records``):

  * ``superseded`` (the default): every ``deployed`` record is marked ``superseded`` (its
    ``status`` label and ``info.status``), and the last revision's manifest no longer lists
    the objects taken. ``helm list`` no longer shows the release (``--all`` shows it
    superseded), ``helm history`` keeps it, and ``helm uninstall`` deletes only what Helm
    still holds and purges the records;
  * ``removed``: every record of the release is deleted: Helm no longer knows it at all.
    Refused when the release holds objects the source does not take (they would be left
    with no owner, still carrying Helm's marks).

``read_hand_over`` only reads (a plan says what will happen); ``hand_over`` writes, once
every object the release loses has been applied by shipway.

Helm's records (REFERENCE.md, :mod:`.helm`): Secrets ``sh.helm.release.v1.<name>.v<N>`` of
type ``helm.sh/release.v1``, labelled ``owner=helm, name, status, version``; data
``release`` = base64(gzip(JSON)) under the Secret's own base64.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Secret as SecretObject
from lightkube.types import PatchType

from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.helm import (
    OWNER_LABEL,
    SECRET_DATA_KEY,
    SECRET_TYPE,
    decode_payload,
)
from shipway.backends.kubernetes.sources import source_key
from shipway.errors import InputError

SUPERSEDED = "superseded"
REMOVED = "removed"
DOCUMENT_SEPARATOR = re.compile(r"(?m)^---[ \t]*$")


@dataclass(frozen=True)
class HandOver:
    """What a take-over does to one Helm release's records."""

    release: str
    namespace: str
    mode: str
    #: the unit keys of the objects taken from it
    taken: frozenset[str]
    #: its record Secrets, oldest first, and its last revision
    records: tuple[str, ...]
    latest: int
    #: what its last revision's manifest still lists once the taken objects are gone
    left: tuple[str, ...]

    def describe(self) -> str:
        where = f"Helm release {self.release} (namespace {self.namespace})"
        if self.mode == REMOVED:
            n = len(self.records)
            return (
                f"{where}: its {n} record{'s' if n != 1 else ''} will be removed "
                '(helm_records = "removed"): helm list and helm uninstall no longer know it'
            )
        still = f"; it still holds {', '.join(self.left)}" if self.left else ""
        return (
            f"{where}: its records will be marked superseded and revision {self.latest} no "
            f"longer lists the {len(self.taken)} object{'s' if len(self.taken) != 1 else ''} "
            'taken (helm_records = "superseded"): helm list no longer shows it, helm '
            f"uninstall leaves them{still}"
        )


def manifest_keys(manifest: str) -> list[str]:
    """The unit keys of the objects a Helm manifest lists, in its order."""
    return [k for _, k in _documents(manifest) if k]


def _documents(manifest: str) -> list[tuple[str, str | None]]:
    """Each document of a manifest (its text, comments kept) with its key (None: not an
    object, e.g. only a comment)."""
    out: list[tuple[str, str | None]] = []
    for text in DOCUMENT_SEPARATOR.split(manifest):
        if not text.strip():
            continue
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            doc = None
        key = None
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else None
        if isinstance(doc, dict) and doc.get("kind") and name:
            key = source_key(str(doc.get("apiVersion", "")), str(doc["kind"]), str(name))
        out.append((text, key))
    return out


def without(manifest: str, keys: Iterable[str]) -> str:
    """The manifest without the documents of ``keys`` (the rest as Helm wrote them)."""
    gone = set(keys)
    kept = [text.strip("\n") for text, key in _documents(manifest) if key not in gone]
    return "".join(f"---\n{text}\n" for text in kept)


def encode_payload(doc: dict[str, Any]) -> str:
    """Helm's own layer, as its Secret driver writes it: base64(gzip(JSON))."""
    return base64.b64encode(gzip.compress(json.dumps(doc).encode())).decode()


def _records(client: Client, namespace: str, release: str) -> list[tuple[str, dict[str, Any]]]:
    """The release's record Secrets (name, decoded record), oldest first."""
    found = []
    listed = client.list(
        SecretObject, namespace=namespace, labels={OWNER_LABEL[0]: OWNER_LABEL[1], "name": release}
    )
    for secret in listed:
        if secret.type != SECRET_TYPE or secret.metadata is None:
            continue
        name = str(secret.metadata.name)
        data = (secret.data or {}).get(SECRET_DATA_KEY)
        if data is None:
            continue
        doc = decode_payload(base64.b64decode(data), source=f"Secret {name}")
        found.append((name, doc))
    return sorted(found, key=lambda nd: int(nd[1].get("version") or 0))


def read_hand_over(
    client: Client, namespace: str, release: str, taken: Iterable[str], mode: str
) -> HandOver | None:
    """What taking ``taken`` does to the release's records (None: it has none left);
    InputError when ``removed`` would leave objects of the release with no owner."""
    records = _records(client, namespace, release)
    if not records:
        return None
    keys = frozenset(taken)
    latest = records[-1][1]
    left = tuple(k for k in manifest_keys(str(latest.get("manifest") or "")) if k not in keys)
    if mode == REMOVED and left:
        raise InputError(
            f"Helm release {release} (namespace {namespace}) also holds {', '.join(left)}, "
            "which the source does not take: removing its records would leave them with no "
            'owner (hint: add them to the source, or helm_records = "superseded" in the '
            "slot's source)"
        )
    return HandOver(
        release=release,
        namespace=namespace,
        mode=mode,
        taken=keys,
        records=tuple(name for name, _ in records),
        latest=int(latest.get("version") or 0),
        left=left,
    )


def hand_over(client: Client, plan: HandOver, by: str) -> str:
    """Do what ``plan`` says to the release's records (read again: Helm may have written
    since); the line that says what was done."""
    where = f"Helm release {plan.release} (namespace {plan.namespace})"
    records = _records(client, plan.namespace, plan.release)
    if plan.mode == REMOVED:
        for name, _ in records:
            client.delete(SecretObject, name, namespace=plan.namespace)
        return f"{where}: removed its {len(records)} record(s): Helm no longer knows it"
    for i, (name, doc) in enumerate(records):
        last = i == len(records) - 1
        info = doc.setdefault("info", {})
        if info.get("status") != "deployed" and not last:
            continue
        if last:
            doc["manifest"] = without(str(doc.get("manifest") or ""), plan.taken)
            info["description"] = f"Superseded: its objects were taken over by shipway ({by})"
        info["status"] = SUPERSEDED
        payload = encode_payload(doc)
        client.patch(
            SecretObject,
            name,
            {
                "metadata": {"labels": {"status": SUPERSEDED}},
                "data": {SECRET_DATA_KEY: base64.b64encode(payload.encode()).decode()},
            },
            namespace=plan.namespace,
            patch_type=PatchType.MERGE,
            field_manager=render.MANAGER,
        )
    return (
        f"{where}: marked superseded; its revision {records[-1][1].get('version')} no longer "
        "lists the objects taken (helm uninstall leaves them)"
    )
