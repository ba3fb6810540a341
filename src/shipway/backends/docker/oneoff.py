"""One-off commands on a Docker host (``shipway run``): a container of the deployed
release's image, with the environment, network and files of the process's containers, on a
host that runs that process (``--host`` picks one), removed afterwards on every path.

Attached like ``docker run``, through the Engine API's attach stream (no docker CLI): its
output is streamed as it comes; ``-i`` passes this process's standard input through (its end
closes the command's); ``-t`` gives it a terminal — this terminal is put in raw mode while it
runs, so keys (Ctrl-C included) reach the command, and its size is passed on.
"""

from __future__ import annotations

import contextlib
import os
import secrets as tokens
import socket
import sys
import termios
import threading
import tty as terminal
from collections.abc import Iterator, Mapping
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.utils.socket import STDERR, frames_iter

from shipway.backends.docker import labels
from shipway.backends.docker.containers import (
    ContainerSpec,
    create,
    data_mounts,
    ensure_image,
    ensure_network,
    file_mounts,
)
from shipway.backends.docker.edge import edge, explain
from shipway.backends.docker.state import DockerState
from shipway.backends.imagemeta import start_command
from shipway.backends.oneoff import (
    NOT_FOUND,
    NOT_RUNNABLE,
    OWNER_LABEL,
    orphaned,
    owner,
    stopped_on_signals,
)
from shipway.backends.protocol import OneOffCommand, Reporter
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.release.artifact import Unit
from shipway.release.model import Release
from shipway.spec.model import Target
from shipway.spec.secrets import Masker, Secret, placeholder, reveal


class DockerCommands(DockerState):
    """run_command."""

    def run_command(
        self,
        clearance: Clearance,
        target: Target,
        release: Release,
        oneoff: OneOffCommand,
        secrets: Mapping[str, Secret],
        reporter: Reporter,
    ) -> int:
        self._guard(clearance, target)
        host, sample = self._one_off_host(release, oneoff)
        body: dict[str, Any] = dict(sample.body) if sample else {}
        env = dict(body.get("env") or {}) or {
            **self.app.env,
            **{n: placeholder(n) for n in self.app.secrets},
        }
        env.pop("PORT", None)
        start = start_command(release.image_meta, oneoff.process, oneoff.command)
        image = release.image_ref() or str(body.get("image") or self.app.image)
        name = labels.one_off(self.app.name, self.slot.name, oneoff.process, tokens.token_hex(4))
        mask = Masker.of(secrets)
        with edge(f"host {host}: one-off command"):
            client = self._conn(host).client()
            self._reap_orphans(client, host, reporter)
            network = labels.network(self.app.name, self.slot.name)
            ensure_network(client, self.app.name, self.slot.name, network)
            ensure_image(client, image)
            c = create(
                client,
                ContainerSpec(
                    image=image,
                    name=name,
                    env={
                        **{k: str(v) for k, v in reveal(env, secrets).items()},
                        **dict(oneoff.env),
                    },
                    labels={
                        **labels.base(self.app.name, self.slot.name, labels.ONE_OFF),
                        labels.PROCESS: oneoff.process,
                        labels.RELEASE: str(release.revision),
                        OWNER_LABEL: owner(),
                    },
                    entrypoint=start.entrypoint,
                    command=start.args or (),
                    network=network,
                    mounts=file_mounts(client, body) + data_mounts(body),
                    stdin_open=oneoff.attached,
                    tty=oneoff.terminal,
                ),
            )
        reporter.line(f"  one-off container {name} on {host} (image {image})")
        try:
            with stopped_on_signals(), edge(f"host {host}: one-off command {name}"):
                code = _attached(client, c, oneoff, reporter, mask)
        finally:
            try:
                with edge(f"host {host}: removing {name}"):
                    c.remove(force=True)
            except BackendError as exc:  # reported, never swallowed (invariant 7)
                reporter.line(f"warning: {exc}; to fix by hand: docker rm -f {name} on {host}")
        reporter.line(f"  one-off container {name} exited with {code}; removed")
        return code

    def _reap_orphans(self, client: docker.DockerClient, host: str, reporter: Reporter) -> None:
        """Remove the slot's one-off containers on ``host`` whose shipway is provably gone
        (killed: its ``finally`` never ran) — started from this machine by a process that no
        longer runs. Another machine's one-offs are left alone: nothing proves them orphaned."""
        for c in self._labelled(client, labels.ONE_OFF):
            tags = c.labels or {}
            if not orphaned(tags.get(OWNER_LABEL)):
                continue
            name = c.name or str(c.id)[:12]
            try:
                with edge(f"host {host}: removing the orphaned one-off {name}"):
                    c.remove(force=True)
            except BackendError as exc:  # reported, never swallowed (invariant 7)
                reporter.line(f"warning: {exc}; to fix by hand: docker rm -f {name} on {host}")
                continue
            reporter.line(
                f"  removed one-off container {name} on {host}: the shipway that ran it "
                f"({tags.get(OWNER_LABEL)}) is gone"
            )

    def _one_off_host(self, release: Release, oneoff: OneOffCommand) -> tuple[str, Unit | None]:
        """The host to run on — one that runs the process (``oneoff.host``, else the first)
        — and one of the process's containers there, whose body the command copies."""
        units = [
            u
            for u in release.artifact
            if u.kind == "container" and u.process == oneoff.process and u.host
        ]
        runs_on = list(dict.fromkeys(str(u.host) for u in units))
        if oneoff.host is not None and oneoff.host not in self.connections:
            raise InputError(
                f"--host {oneoff.host!r} is not a host of slot {self.slot.name!r} "
                f"(hosts: {', '.join(self.connections)})"
            )
        if oneoff.host is not None and runs_on and oneoff.host not in runs_on:
            raise InputError(
                f"--host {oneoff.host}: {oneoff.process} of r{release.revision} runs on "
                f"{', '.join(runs_on)} only (hint: pick one of them, or another --process)"
            )
        host = oneoff.host or (runs_on[0] if runs_on else self.primary)
        return host, next((u for u in units if u.host == host), None)


def _attached(
    client: docker.DockerClient,
    c: Container,
    oneoff: OneOffCommand,
    reporter: Reporter,
    mask: Masker,
) -> int:
    """Attach (before the start: no output is missed), start, stream, wait: the exit code."""
    params = {"stdin": int(oneoff.attached), "stdout": 1, "stderr": 1, "stream": 1}
    sock = client.api.attach_socket(str(c.id), params=params)
    try:
        try:
            c.start()
        except docker.errors.APIError as exc:
            why = explain(exc)
            if "executable file not found" in why or "no such file" in why:
                reporter.line(mask(f"  {oneoff.command[0]}: command not found in the image"))
                return NOT_FOUND
            if "permission denied" in why:
                reporter.line(mask(f"  {oneoff.command[0]}: permission denied in the image"))
                return NOT_RUNNABLE
            raise
        with _raw_terminal(oneoff.terminal):
            if oneoff.terminal:
                _pass_size(client, c)
            if oneoff.attached:
                threading.Thread(target=_pump_stdin, args=(sock,), daemon=True).start()
            out, err = sys.stdout.buffer, sys.stderr.buffer
            frames: Iterator[tuple[int, bytes]] = frames_iter(sock, oneoff.terminal)  # type: ignore[no-untyped-call]
            for stream, data in frames:
                sink = err if stream == STDERR else out
                sink.write(data)
                sink.flush()
        return int(c.wait().get("StatusCode", -1))
    finally:
        with contextlib.suppress(Exception):
            sock.close()


def _pump_stdin(sock: Any) -> None:
    """This process's standard input to the command, then its end (the command's EOF)."""
    raw = getattr(sock, "_sock", sock)  # a unix socket's SocketIO, or an SSH channel
    try:
        while chunk := os.read(0, 4096):
            raw.sendall(chunk)
    except OSError:
        return  # the command is gone: nothing more to pass on
    with contextlib.suppress(OSError):
        if hasattr(raw, "shutdown_write"):
            raw.shutdown_write()
        else:
            raw.shutdown(socket.SHUT_WR)


def _pass_size(client: docker.DockerClient, c: Container) -> None:
    with contextlib.suppress(OSError, docker.errors.APIError):
        size = os.get_terminal_size(sys.stdout.fileno())
        client.api.resize(str(c.id), height=size.lines, width=size.columns)


@contextlib.contextmanager
def _raw_terminal(wanted: bool) -> Iterator[None]:
    """This terminal in raw mode while the command has one (keys go to it as they are
    typed); put back as it was on every path. Nothing happens without a terminal."""
    if not wanted or not os.isatty(0):
        yield
        return
    saved = termios.tcgetattr(0)
    terminal.setraw(0)
    try:
        yield
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
