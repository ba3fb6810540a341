"""The stored form of a release record: versioned JSON, gzip-compressed.

Schema history (records of every older schema are migrated on read):
  1  a single global ``deployment_id``
  2  per-process ``deployment_ids`` (v1 records give the global id to every process);
     later, optionally, ``secret_marks`` (records without them read as having none)

Optional keys added without a schema change, so records stay readable both ways (an older
shipway ignores them, a newer one reads their absence as "none"): ``build`` (what the build
phase made), ``image_meta.exposed_port`` and ``audit`` (who made the release, under which
clearance, what it changed: release/audit.py).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any

from shipway.errors import RecordError
from shipway.release.artifact import Artifact
from shipway.release.audit import Audit
from shipway.release.model import BuildRecord, ImageMeta, Release, ReleaseStatus, SecretMarks

SCHEMA_VERSION = 2
GZIP_MAGIC = b"\x1f\x8b"


def to_json(release: Release, *, marks: bool = True) -> dict[str, Any]:
    """The record's JSON. ``marks=False``: without the secret marks, for every form that
    is shown or saved outside the target (a plan file, ``-o json``)."""
    out: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "app": release.app,
        "slot": release.slot,
        "revision": release.revision,
        "status": str(release.status),
        "image": release.image,
        "digest": release.digest,
        "image_meta": release.image_meta.to_json() if release.image_meta else None,
        "deployment_ids": dict(release.deployment_ids),
        "spec": release.spec,
        "config_hash": release.config_hash,
        "artifact": release.artifact.to_json(),
        "description": release.description,
        "created_at": release.created_at,
        "updated_at": release.updated_at,
        "actor": release.actor,
        "generation": release.generation,
        "build": release.build.to_json() if release.build else None,
        "audit": release.audit.to_json() if release.audit else None,
    }
    if release.canary:
        out["canary"] = [dict(step) for step in release.canary]
    if marks and release.secret_marks.salt:
        out["secret_marks"] = release.secret_marks.to_json()
    return out


def _migrate_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    global_id = data.pop("deployment_id", None)
    processes = (data.get("spec") or {}).get("processes") or {}
    data["deployment_ids"] = {name: global_id for name in processes} if global_id else {}
    return data


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _migrate_1_to_2}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    version = data.get("schema", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise RecordError(
            f"release record has schema {version!r}; this shipway reads up to {SCHEMA_VERSION} "
            "(hint: upgrade shipway)"
        )
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](dict(data))
        version += 1
        data["schema"] = version
    return data


def from_json(data: dict[str, Any]) -> Release:
    data = migrate(data)
    try:
        return Release(
            app=data["app"],
            slot=data["slot"],
            revision=int(data["revision"]),
            status=ReleaseStatus(data["status"]),
            image=data.get("image"),
            digest=data.get("digest"),
            image_meta=ImageMeta.from_json(data["image_meta"]) if data.get("image_meta") else None,
            deployment_ids=dict(data.get("deployment_ids") or {}),
            spec=data.get("spec") or {},
            config_hash=data.get("config_hash", ""),
            artifact=Artifact.from_json(data.get("artifact") or []),
            description=data.get("description", ""),
            created_at=data.get("created_at", ""),
            updated_at=data.get("updated_at", ""),
            actor=data.get("actor", ""),
            generation=data.get("generation"),
            secret_marks=SecretMarks.from_json(data.get("secret_marks")),
            build=BuildRecord.from_json(data["build"]) if data.get("build") else None,
            canary=tuple(dict(step) for step in data.get("canary") or ()),
            audit=Audit.from_json(data.get("audit")),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise RecordError(f"release record is malformed: {exc}") from exc


def encode(release: Release, limit: int | None = None) -> bytes:
    """gzip(JSON). With ``limit``, refuse a record that would not fit where it is stored."""
    raw = json.dumps(to_json(release), sort_keys=True, separators=(",", ":")).encode()
    blob = gzip.compress(raw, mtime=0)
    if limit is not None and len(blob) > limit:
        raise RecordError(
            f"release record {release.app} r{release.revision} is {len(blob)} bytes compressed, "
            f"over the {limit}-byte limit of its store (hint: shrink config files, or keep large "
            "files out of the spec)"
        )
    return blob


def decode(blob: bytes) -> Release:
    """Read a stored record; plain JSON (no gzip magic) is accepted too."""
    try:
        raw = gzip.decompress(blob) if blob[:2] == GZIP_MAGIC else blob
        data = json.loads(raw)
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordError(f"release record cannot be decoded: {exc}") from exc
    if not isinstance(data, dict):
        raise RecordError("release record is not a JSON object")
    return from_json(data)
