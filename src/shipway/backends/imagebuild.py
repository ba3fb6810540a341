"""Building an app's image through the Docker Engine API, pushing it, and reading what was
built — shared by the Docker and Kubernetes backends (a cluster builds nothing itself).

The engine is the one ``[build] host`` names (``unix://…``, or ``ssh://…`` verified like
any Docker host of shipway's), else the one ``DOCKER_HOST`` names, else the default socket.
The image is tagged with its inputs' content digest (``<repository>:src-<digest>``, the
repository ``app.image`` names), so whether it was built already is a question for the
registry: a tag that is there is reused, never rebuilt. It is pushed with the user's own
Docker credentials (the SDK reads ``~/.docker/config.json``), and what the release runs is
the digest the push returns — never the tag. Its metadata (kind, working directory, exposed
port) is read from the built image itself and recorded.

What must never happen: a build context holding a secret file, ``.env``, VCS or virtualenv
directories (:mod:`.buildcontext`); a failed build or push that reads as a success; a
library's exception crossing this edge (they become BuildFailed or BackendError).
"""

from __future__ import annotations

import collections
import re
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from shipway.backends.buildcontext import BuildContext
from shipway.backends.guarded import Guarded
from shipway.backends.imagemeta import classify, repository_of
from shipway.backends.protocol import BuildInputs, Built, Reporter
from shipway.errors import BackendError, BuildFailed, InputError, RegistryLookupFailed
from shipway.guard import Clearance
from shipway.spec.model import App, DockerHost, Target

if TYPE_CHECKING:
    import docker

BUILD_TIMEOUT = 1800  #: seconds one read of the build's stream may wait (a long RUN step)
TAIL = 25  #: lines of the build's log a failure carries
INPUTS_LABEL = "org.shipway.build.inputs"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # a RUN step's colours (pip's warnings in red)


def tag_for(app: App, inputs: str) -> str:
    """``<repository>:src-<16 hex of the inputs digest>``: known before anything is built."""
    if not app.image:
        raise InputError(
            'nothing names where the built image goes: set image = "registry/team/app" under '
            "[app] (its repository is where shipway pushes what it builds)"
        )
    return f"{repository_of(app.image)}:src-{inputs.removeprefix('sha256:')[:16]}"


class ImageBuilder:
    """Builds one app's image on one engine. Opens nothing until first used."""

    def __init__(
        self,
        app: App,
        *,
        known_hosts: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.app = app
        self._known_hosts = known_hosts
        self._environ = environ
        self._client: docker.DockerClient | None = None
        self._closer: Any = None
        self._insecure: tuple[str, ...] | None = None

    @property
    def engine(self) -> str:
        return self.app.build.host or "DOCKER_HOST (or the default socket)"

    # -- the engine --------------------------------------------------------------------

    @contextmanager
    def _edge(self, what: str) -> Iterator[None]:
        import docker.errors
        import requests.exceptions

        try:
            yield
        except (BuildFailed, InputError):
            raise
        except docker.errors.APIError as exc:
            words = exc.explanation if isinstance(exc.explanation, str) else str(exc)
            raise BuildFailed(
                f"{what} on {self.engine}: the Docker engine refused: {words}"
            ) from exc
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise BackendError(f"{what} on {self.engine}: {exc}") from exc
        except OSError as exc:
            raise BackendError(f"{what} on {self.engine}: {exc}") from exc

    def client(self) -> docker.DockerClient:
        if self._client is None:
            from shipway.backends import dockersdk

            dockersdk.load()  # without its SSH transport unless the engine is over SSH
            import docker

            host = self.app.build.host
            with self._edge("connect to the build engine"):
                if host is None:
                    self._no_socket()
                    client = docker.from_env(timeout=BUILD_TIMEOUT, environment=self._environ)
                    self._closer = client
                else:
                    from shipway.backends.docker.connection import HostConnection
                    from shipway.backends.docker.machines import addresses

                    conn = HostConnection(
                        addresses([DockerHost(host)])[0],
                        known_hosts=self._known_hosts,
                        base_dir=self.app.source_dir,
                        environ=self._environ,
                    )
                    self._closer = conn
                    client = conn.client()
                client.api.timeout = BUILD_TIMEOUT
            self._client = client
        return self._client

    def _no_socket(self) -> None:
        """Raise at once when the engine ``DOCKER_HOST`` names (else the default socket) is
        a local socket that does not exist: no retry or timeout makes it appear."""
        import os

        from shipway.backends.docker.connection import socket_problem
        from shipway.backends.docker.machines import addresses

        environ = os.environ if self._environ is None else self._environ
        url = environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        if not url.startswith("unix://"):
            return
        try:
            address = addresses([DockerHost(url)])[0]
        except InputError:
            return  # the SDK says what is wrong with it
        named = "DOCKER_HOST" if environ.get("DOCKER_HOST") else "the default socket"
        problem = socket_problem(
            address, f"the build engine ({named})", "in DOCKER_HOST or [build] host"
        )
        if problem is not None:
            raise BackendError(problem)

    def _insecure_registries(self) -> tuple[str, ...]:
        """The registries the build engine pushes to over plain HTTP: shipway reads the
        registry the way that engine pushes."""
        if self._insecure is None:
            from shipway.backends.registry import insecure_registries

            try:
                with self._edge("engine info"):
                    info = self.client().info()
            except BackendError:
                info = {}
            self._insecure = insecure_registries(info)
        return self._insecure

    def close(self) -> None:
        if self._closer is not None:
            self._closer.close()
        self._client = self._closer = None

    def __enter__(self) -> ImageBuilder:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- plan time: what would be built, and is it there already ------------------------

    def inputs(self) -> BuildInputs:
        """What a build would make from the app's source now. Read-only."""
        from shipway.backends.registry import lookup

        context = BuildContext.of(self.app)
        digest = context.digest()
        tag = tag_for(self.app, digest)
        source = f"{self.app.build.dockerfile} ({sum(1 for _ in context.files())} files)"
        try:
            found = lookup(tag, insecure=self._insecure_registries())
        except RegistryLookupFailed:
            return BuildInputs("image", tag, digest, source)
        return BuildInputs("image", tag, digest, source, True, found.digest, classify(found.attrs))

    # -- the build ---------------------------------------------------------------------

    def build(self, planned: BuildInputs, reporter: Reporter) -> Built:
        """Build, push and read the image ``planned`` names — or, when an image of exactly
        those inputs is in the registry already, use that one without building."""
        started = time.monotonic()
        now = self.inputs()
        if now.inputs != planned.inputs:
            raise BuildFailed(
                f"the app's source changed since the plan was made (inputs {planned.inputs[:19]}…"
                f", now {now.inputs[:19]}…): make a new plan"
            )
        if now.reuse and now.digest is not None:
            reporter.line(f"  {now.what} is in the registry already ({now.digest}): not rebuilt")
            return Built(
                "image", now.what, now.inputs, now.source, now.digest, now.meta, reused=True
            )
        context = BuildContext.of(self.app)
        attrs = self._build(context, now, reporter)
        digest = self._push(now.what, reporter)
        return Built(
            "image",
            now.what,
            now.inputs,
            now.source,
            digest,
            classify(attrs),
            duration=time.monotonic() - started,
        )

    def _build(self, context: BuildContext, inputs: BuildInputs, reporter: Reporter) -> Any:
        client = self.client()
        reporter.line(f"  building {inputs.what} on {self.engine}")
        tail: collections.deque[str] = collections.deque(maxlen=TAIL)
        with tempfile.TemporaryFile() as tar, self._edge(f"build {inputs.what}"):
            context.write_tar(tar)
            tar.seek(0)
            stream = client.api.build(
                fileobj=tar,
                custom_context=True,
                tag=inputs.what,
                dockerfile=context.dockerfile,
                buildargs=dict(context.args),
                labels={INPUTS_LABEL: inputs.inputs},
                rm=True,
                forcerm=True,
                decode=True,
            )
            for chunk in stream:
                if "error" in chunk:
                    detail = chunk.get("errorDetail") or {}
                    raise BuildFailed(
                        f"the image build failed: {str(chunk['error']).strip()}"
                        + (f" (exit code {detail['code']})" if "code" in detail else ""),
                        tuple(tail),
                    )
                for line in _ANSI.sub("", str(chunk.get("stream") or "")).splitlines():
                    if line.strip():
                        tail.append(line.rstrip())
                        reporter.line(f"  build | {line.rstrip()}")
            return client.images.get(inputs.what).attrs

    def _push(self, tag: str, reporter: Reporter) -> str:
        repository, _, name = tag.rpartition(":")
        client = self.client()
        reporter.line(f"  pushing {tag}")
        digest = None
        pushed: set[str] = set()
        with self._edge(f"push {tag}"):
            for chunk in client.api.push(repository, tag=name, stream=True, decode=True):
                if "error" in chunk:
                    raise BuildFailed(f"pushing {tag} failed: {str(chunk['error']).strip()}")
                status = str(chunk.get("status") or "")
                if status in ("Pushed", "Layer already exists") and chunk.get("id"):
                    pushed.add(str(chunk["id"]))
                    reporter.progress("push", {"layers": len(pushed)}, status.lower())
                aux = chunk.get("aux") or {}
                if isinstance(aux, Mapping) and aux.get("Digest"):
                    digest = str(aux["Digest"])
        if digest is None:
            raise BuildFailed(f"pushing {tag}: the registry named no digest for it")
        reporter.line(f"  pushed {repository}@{digest}")
        return digest


class ImageBuilds(Guarded):
    """The build phase of a backend that runs images (Docker, Kubernetes): an image is built
    only when asked for (``--build``, ``shipway build``); otherwise ``app.image`` is
    deployed as it is. Each call opens the build engine and closes it again."""

    def _image_builder(self, app: App) -> ImageBuilder:
        return ImageBuilder(app, known_hosts=self.slot.known_hosts)

    def build_inputs(
        self, target: Target, app: App, ref: str | None, image: bool
    ) -> BuildInputs | None:
        self._serves(target)
        if ref is not None or not image:  # an image given is deployed as it is
            return None
        with self._image_builder(app) as builder:
            return builder.inputs()

    def build(
        self,
        clearance: Clearance,
        target: Target,
        app: App,
        inputs: BuildInputs,
        reporter: Reporter,
    ) -> Built:
        self._guard(clearance, target)
        with self._image_builder(app) as builder:
            return builder.build(inputs, reporter)
