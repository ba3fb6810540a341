"""The machines of a docker slot (its Docker engines): their addresses and short names. PURE.

A host's name appears in unit keys (``container/web.1/<id>@web1``), in every plan line
("create … on web1") and in every message about it, so it must be short, stable when the
list is reordered, and unique within the slot.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from shipway.errors import InputError
from shipway.spec.model import DockerHost

Scheme = Literal["unix", "ssh"]
DEFAULT_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


@dataclass(frozen=True)
class HostAddress:
    """One Docker engine of a slot, parsed.

    ``name``: ``local`` for this machine's default socket, the socket's stem for another
    local socket (``unix:///run/x/docker-a.sock`` → ``docker-a``), ``host`` or
    ``host:port`` for SSH.

    ``path``: the engine's socket; over SSH, the one on the host that the URL's path names
    (``ssh://deploy@web1/run/docker.sock``: each API connection is a channel sshd forwards
    to it, nothing started on the host), or None (each runs ``docker system dial-stdio``
    there, reaching the engine the host's environment names, as ``docker -H ssh://`` does).
    """

    url: str
    name: str
    scheme: Scheme
    path: str | None = None  # unix; ssh: the socket on the host, if the URL names one
    user: str | None = None  # ssh
    hostname: str | None = None  # ssh
    port: int | None = None  # ssh
    processes: tuple[str, ...] | None = None

    def runs(self, process: str) -> bool:
        return self.processes is None or process in self.processes

    @property
    def over_ssh(self) -> bool:
        return self.scheme == "ssh"

    @property
    def engine_url(self) -> str:
        """The URL the Docker SDK is given (it takes no path after an SSH host)."""
        if self.scheme != "ssh" or self.path is None:
            return self.url
        return urllib.parse.urlunsplit(urllib.parse.urlsplit(self.url)._replace(path=""))

    def __str__(self) -> str:
        return self.name


def parse(url: str) -> tuple[Scheme, str | None, str | None, str | None, int | None]:
    """(scheme, path, user, hostname, port) of a host URL; InputError when unusable."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "unix":
        path = parsed.path or parsed.netloc
        if not path.startswith("/"):
            raise InputError(f"docker host {url!r}: a unix socket needs an absolute path")
        return "unix", path, None, None, None
    if parsed.scheme == "ssh":
        try:
            port = parsed.port
        except ValueError as exc:
            raise InputError(f"docker host {url!r}: bad port ({exc})") from exc
        if not parsed.hostname:
            raise InputError(f"docker host {url!r}: no host name")
        socket_path = parsed.path if parsed.path not in ("", "/") else None
        if socket_path is not None and (parsed.query or parsed.fragment):
            raise InputError(
                f"docker host {url!r}: the path after the host is the engine's socket on it "
                "(hint: ssh://user@host/var/run/docker.sock, with no '?' or '#')"
            )
        return "ssh", socket_path, parsed.username, parsed.hostname, port
    raise InputError(
        f"docker host {url!r}: only unix:// and ssh:// hosts are supported "
        "(hint: reach a remote engine as ssh://user@host; an unencrypted tcp:// Docker API is "
        "not used, and health checks need the SSH connection to reach the containers)"
    )


def _short_name(scheme: Scheme, path: str | None, hostname: str | None, port: int | None) -> str:
    if scheme == "unix":
        assert path is not None
        return "local" if path in DEFAULT_SOCKETS else PurePosixPath(path).stem
    assert hostname is not None
    return hostname if port in (None, 22) else f"{hostname}:{port}"


def addresses(hosts: Sequence[DockerHost]) -> list[HostAddress]:
    """The slot's hosts, parsed and named. Two hosts that would share a short name are
    named by their full URL instead; the same URL twice is an error."""
    parsed = []
    for host in hosts:
        scheme, path, user, hostname, port = parse(host.url)
        parsed.append((host, scheme, path, user, hostname, port))
    seen_urls: set[str] = set()
    for host, *_ in parsed:
        if host.url in seen_urls:
            raise InputError(f"docker host {host.url!r} is listed twice in the slot")
        seen_urls.add(host.url)
    names = [_short_name(s, p, h, port) for _, s, p, _, h, port in parsed]
    out = []
    for (host, scheme, path, user, hostname, port), name in zip(parsed, names, strict=True):
        if names.count(name) > 1:
            name = host.url
        out.append(
            HostAddress(
                url=host.url,
                name=name,
                scheme=scheme,
                path=path,
                user=user,
                hostname=hostname,
                port=port,
                processes=host.processes,
            )
        )
    return out
