"""What kind of image an app runs, and how to start one of its processes. PURE.

Shared by the Docker and Kubernetes backends: both inspect an image (the Docker Engine's
image inspect attributes: ``Config.Env``, ``Config.Labels``, ``Config.WorkingDir``,
``RepoDigests``) and must start a process the way its builder expects. Getting this wrong
is silent and costly: a herokuish image started as a plain "dockerfile" image loses its
``/start`` wrapper (no buildpack environment, no Procfile); a Cloud Native Buildpacks image
started without its launcher loses the layers' environment.

Detection follows dokku (``common.IsImageCnbBased`` / ``IsImageHerokuishBased``):

* ``pack``: any Cloud Native Buildpacks label (``io.buildpacks.*`` — lifecycle or build
  metadata, or the older ``io.buildpacks.stack.id``); working dir ``/workspace``.
* ``herokuish``: ``USER=herokuishuser`` in the image's environment (the user herokuish
  builds and runs as); working dir ``/app``.
* ``dockerfile``: anything else; working dir from the image's ``WORKDIR``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shipway.release.model import ImageMeta

CNB_LABELS = (
    "io.buildpacks.lifecycle.metadata",
    "io.buildpacks.build.metadata",
    "io.buildpacks.stack.id",
)
CNB_LAUNCHER = "/cnb/lifecycle/launcher"
CNB_PROCESS_DIR = "/cnb/process"
CNB_WORKING_DIR = "/workspace"
HEROKUISH_USER = "herokuishuser"
HEROKUISH_WORKING_DIR = "/app"
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")


def _config(attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    config = attrs.get("Config") or {}
    return config if isinstance(config, Mapping) else {}


def _labels(attrs: Mapping[str, Any]) -> Mapping[str, str]:
    labels = _config(attrs).get("Labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def _env(attrs: Mapping[str, Any]) -> list[str]:
    env = _config(attrs).get("Env") or []
    return [e for e in env if isinstance(e, str)]


def is_cnb(attrs: Mapping[str, Any]) -> bool:
    labels = _labels(attrs)
    return any(labels.get(name) for name in CNB_LABELS)


def is_herokuish(attrs: Mapping[str, Any], app_user: str = HEROKUISH_USER) -> bool:
    return f"USER={app_user}" in _env(attrs)


def exposed_port(attrs: Mapping[str, Any]) -> int | None:
    """The lowest TCP port the image EXPOSEs (``Config.ExposedPorts``: ``{"8000/tcp": {}}``)."""
    ports = _config(attrs).get("ExposedPorts") or {}
    found = []
    for key in ports if isinstance(ports, Mapping) else ():
        number, _, proto = str(key).partition("/")
        if number.isdigit() and proto in ("", "tcp"):
            found.append(int(number))
    return min(found) if found else None


def classify(attrs: Mapping[str, Any]) -> ImageMeta:
    """The source type, working dir and exposed port of an image, from its inspect
    attributes (or its config, read from a registry: the same shape)."""
    port = exposed_port(attrs)
    if is_cnb(attrs):
        return ImageMeta(source_type="pack", working_dir=CNB_WORKING_DIR, exposed_port=port)
    if is_herokuish(attrs):
        return ImageMeta(
            source_type="herokuish", working_dir=HEROKUISH_WORKING_DIR, exposed_port=port
        )
    workdir = _config(attrs).get("WorkingDir") or None
    return ImageMeta(source_type="dockerfile", working_dir=workdir, exposed_port=port)


def cnb_process_types(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    """The process types a buildpacks image declares (``io.buildpacks.build.metadata``)."""
    raw = _labels(attrs).get("io.buildpacks.build.metadata")
    if not raw:
        return ()
    try:
        data = json.loads(raw)
    except ValueError:
        return ()
    processes = data.get("processes") if isinstance(data, Mapping) else None
    if not isinstance(processes, list):
        return ()
    return tuple(
        str(p["type"])
        for p in processes
        if isinstance(p, Mapping) and isinstance(p.get("type"), str)
    )


def repo_digest(attrs: Mapping[str, Any], ref: str) -> str | None:
    """The registry digest (``sha256:…``) of ``ref``'s repository, from ``RepoDigests``.

    An image pulled from (or pushed to) a registry lists ``repo@sha256:…`` per repository;
    an image built locally and never pushed has none, and then there is no digest.
    """
    digests = [d for d in attrs.get("RepoDigests") or [] if isinstance(d, str) and "@" in d]
    if "@" in ref:
        wanted = ref.split("@", 1)[1]
        return wanted if any(d.endswith("@" + wanted) for d in digests) else None
    repo = repository_of(ref)
    for entry in digests:
        name, digest = entry.split("@", 1)
        if same_repository(name, repo):
            return digest
    return None


def repository_of(ref: str) -> str:
    """``registry:5000/team/app:tag`` → ``registry:5000/team/app`` (a port is not a tag)."""
    ref = ref.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        return ref[: len(ref) - len(last)] + last.split(":", 1)[0]
    return ref


@dataclass(frozen=True)
class ImageRef:
    """A parsed image reference, normalised the way Docker does: ``web`` is
    ``docker.io/library/web:latest``; a first component with a dot, a colon or
    ``localhost`` names a registry."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, ref: str) -> ImageRef:
        rest, _, digest = ref.partition("@")
        first, slash, remainder = rest.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, remainder
        else:
            registry, path = DOCKER_HUB, rest
        tag: str | None = None
        last = path.rsplit("/", 1)[-1]
        if ":" in last:
            tag = last.split(":", 1)[1]
            path = path[: len(path) - len(last)] + last.split(":", 1)[0]
        if registry in (DOCKER_HUB, "index.docker.io") and "/" not in path:
            path = f"library/{path}"
        if registry == "index.docker.io":
            registry = DOCKER_HUB
        if not path or not REPOSITORY.fullmatch(path):
            raise ValueError(f"not an image reference: {ref!r}")
        return cls(registry, path, tag if tag or digest else "latest", digest or None)

    @property
    def reference(self) -> str:
        """What the manifest is asked for: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def name(self) -> str:
        """``registry/repository``: the form ``RepoDigests`` entries take."""
        return f"{self.registry}/{self.repository}"


def same_repository(a: str, b: str) -> bool:
    """Whether two references (or ``RepoDigests`` names) name one repository, Docker Hub's
    implicit ``docker.io/library/`` included (``nginx`` is ``docker.io/library/nginx``)."""
    try:
        return ImageRef.parse(a).name == ImageRef.parse(b).name
    except ValueError:
        return a == b


@dataclass(frozen=True)
class StartCommand:
    """How to start one process of an image.

    ``entrypoint`` None keeps the image's ENTRYPOINT; ``args`` None keeps the image's CMD.
    (Kubernetes: ``command`` and ``args``; Docker: ``Entrypoint`` and ``Cmd``.)
    """

    entrypoint: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "entrypoint": list(self.entrypoint) if self.entrypoint is not None else None,
            "args": list(self.args) if self.args is not None else None,
        }


def start_command(
    meta: ImageMeta | None, process: str, command: Sequence[str] | None
) -> StartCommand:
    """The start command of ``process`` by image type (dokku's rules):

    * herokuish: ``/start <process>`` (its Procfile entry, in the buildpack environment);
      a declared command runs through ``/exec`` (same environment);
    * pack: the CNB launcher: ``/cnb/process/<process>`` for a process type, or
      ``/cnb/lifecycle/launcher <command>`` for a declared command;
    * dockerfile (and anything else): the declared command as CMD (the image's ENTRYPOINT
      kept), else the image's own CMD.
    """
    kind = meta.source_type if meta is not None else "dockerfile"
    if kind == "herokuish":
        if command:
            return StartCommand(entrypoint=("/exec",), args=tuple(command))
        return StartCommand(entrypoint=("/start",), args=(process,))
    if kind == "pack":
        if command:
            return StartCommand(entrypoint=(CNB_LAUNCHER,), args=tuple(command))
        return StartCommand(entrypoint=(f"{CNB_PROCESS_DIR}/{process}",), args=())
    if command:
        return StartCommand(entrypoint=None, args=tuple(command))
    return StartCommand()
