"""The release phase's command (migrations), run before any new process starts.

What must never happen: a new container started before it succeeded (the engine runs it
first and stops on its failure), a secret value in its output (masked with the values it
got), its container left behind (killed and removed on every path: its timeout, the
deploy's deadline, an interruption), or two copies of it at once (one left by a run killed
with SIGKILL is removed, with a line, before the next one starts).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import docker.errors
import requests

from shipway.backends.docker import container_logs, labels
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.containers import (
    ContainerSpec,
    create,
    data_mounts,
    ensure_image,
    ensure_network,
    file_mounts,
)
from shipway.backends.docker.edge import edge
from shipway.backends.docker.state import DockerState
from shipway.backends.imagemeta import start_command
from shipway.backends.protocol import Failure, Reason, Reporter
from shipway.guard import Clearance
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Secret, placeholder, redact, reveal


class DockerReleaseCommand(DockerState):
    """run_release_command."""

    def _remove_orphans(self, reporter: Reporter) -> None:
        """Remove every release-command container of this slot, on every host, before one
        is started: under the slot's lock none can be this operation's, so any there is
        left by a run killed before it could remove it (SIGKILL) — maybe still running its
        command, which must never run twice at once."""

        def remove_on(conn: HostConnection) -> list[str]:
            gone = []
            with edge(f"host {conn.name}: release command containers left by earlier runs"):
                client = conn.client()
                for c in self._labelled(client, labels.RELEASE_COMMAND):
                    state = str(c.status)
                    c.remove(force=True)
                    gone.append(f"{c.name} ({state})")
            return gone

        for host, gone in self._each_host(remove_on).items():
            for what in gone:
                self._note(host, f"removed {what}, left by an earlier run")
                reporter.line(
                    f"  removed the release command container {what} on {host}, left by an "
                    "earlier run that was killed before it could remove it"
                )

    def run_release_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        command: Sequence[str],
        secrets: Mapping[str, Secret],
        deadline: float,
        reporter: Reporter,
    ) -> Failure | None:
        """Run the release command once, in a container of the new release's image with its
        environment and files, on the host of its first container; wait for it until
        ``deadline``. Its output is shown masked; it is removed on every path."""
        self._guard(clearance, target)
        containers = [u for u in release.artifact if u.kind == "container"]
        host = next((u.host for u in containers), None) or self.primary
        conn = self._conn(host)
        sample = next((u for u in containers if u.host == host), None)
        body: dict[str, Any] = dict(sample.body) if sample else {}
        env = dict(body.get("env") or {})
        env.pop("PORT", None)
        if not body:
            env = {**self.app.env, **{n: placeholder(n) for n in self.app.secrets}}
        start = start_command(release.image_meta, "release", tuple(command))
        name = labels.release_command(self.app.name, self.slot.name, release.revision)
        image = release.image_ref() or str(body.get("image") or self.app.image)
        self._remove_orphans(reporter)
        with edge(f"host {host}: release command"):
            client = conn.client()
            network = labels.network(self.app.name, self.slot.name)
            ensure_network(client, self.app.name, self.slot.name, network)
            ensure_image(client, image)
            revealed = {k: str(v) for k, v in reveal(env, secrets).items()}
            c = create(
                client,
                ContainerSpec(
                    image=image,
                    name=name,
                    env=revealed,
                    labels={
                        **labels.base(self.app.name, self.slot.name, labels.RELEASE_COMMAND),
                        labels.RELEASE: str(release.revision),
                    },
                    entrypoint=start.entrypoint,
                    command=start.args or (),
                    network=network,
                    mounts=file_mounts(client, body) + data_mounts(body),
                ),
            )
            try:
                c.start()
                left = max(deadline - time.monotonic(), 1.0)
                try:
                    result = c.wait(timeout=left)
                except requests.exceptions.RequestException:
                    c.kill()
                    self._trouble = True
                    self._note(host, "release command timed out")
                    return Failure(
                        reason=Reason.RELEASE_COMMAND_TIMEOUT,
                        message=f"the release command did not finish on {host} in time",
                    )
                code = int(result.get("StatusCode", -1))
                tail = container_logs.text(c, container_logs.LOG_TAIL).splitlines()
            finally:
                with contextlib.suppress(docker.errors.DockerException):
                    c.remove(force=True)
        shown = tuple(redact(line, secrets) for line in tail)
        if code != 0:
            self._trouble = True
            self._note(host, f"release command failed (exit {code})")
            return Failure(
                reason=Reason.RELEASE_COMMAND_FAILED,
                message=f"{' '.join(command)} exited with {code} on {host}",
                exit_code=code,
                details=shown,
            )
        self._note(host, "release command ok")
        for line in shown:
            reporter.line(f"  release command: {line}")
        return None
