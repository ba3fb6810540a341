"""Release records: model, statuses, artifact, history rules, stored form."""

from shipway.release.artifact import Artifact, Unit
from shipway.release.codec import SCHEMA_VERSION, decode, encode
from shipway.release.model import ImageMeta, Release, ReleaseStatus

__all__ = [
    "SCHEMA_VERSION",
    "Artifact",
    "ImageMeta",
    "Release",
    "ReleaseStatus",
    "Unit",
    "decode",
    "encode",
]
