"""SSH to a Docker host: whom to trust, and how to say no.

A host key is verified against a known_hosts file BEFORE anything is sent to the host, and
an unknown key is never accepted silently — not even once, not even by default: the refusal
names the key's SHA256 fingerprint and the exact steps to trust it after checking it. A key
that differs from the recorded one is refused loudly: it is what an intercepted connection
looks like.

Which known_hosts file: ``$SHIPWAY_KNOWN_HOSTS``, else the slot's ``known_hosts``, else the
``UserKnownHostsFile`` of the host's entry in the SSH config, else ``~/.ssh/known_hosts``.
Which SSH config: ``$SHIPWAY_SSH_CONFIG``, else ``~/.ssh/config`` (HostName, Port, User,
IdentityFile, ProxyCommand, UserKnownHostsFile are used; ``StrictHostKeyChecking`` is not:
shipway never accepts unknown keys).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import paramiko

from shipway.backends.docker.machines import HostAddress
from shipway.errors import BackendError, HostKeyMismatch, HostKeyRefused, UnknownHostKey

KNOWN_HOSTS_ENV = "SHIPWAY_KNOWN_HOSTS"
SSH_CONFIG_ENV = "SHIPWAY_SSH_CONFIG"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint: ``SHA256:`` + unpadded base64 of the key blob's hash."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class SshParams:
    hostname: str
    port: int
    username: str | None
    key_filenames: tuple[str, ...] = ()
    proxy_command: str | None = None
    known_hosts: Path = field(default_factory=lambda: Path("~/.ssh/known_hosts").expanduser())


def _expand(path: str, base: Path | None = None) -> Path:
    p = Path(os.path.expanduser(path))
    if not p.is_absolute() and base is not None:
        p = base / p
    return p


def ssh_params(
    host: HostAddress,
    *,
    slot_known_hosts: str | None = None,
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> SshParams:
    """Where and as whom to connect, and which known_hosts decides trust."""
    env = os.environ if environ is None else environ
    assert host.hostname is not None
    config_path = _expand(env.get(SSH_CONFIG_ENV) or "~/.ssh/config")
    entry: dict[str, object] = {}
    if config_path.is_file():
        config = paramiko.SSHConfig.from_path(str(config_path))
        entry = dict(config.lookup(host.hostname))
    identity = entry.get("identityfile") or []
    identities = tuple(
        str(_expand(str(p))) for p in (identity if isinstance(identity, list) else [identity])
    )
    known = env.get(KNOWN_HOSTS_ENV)
    if known:
        known_hosts = _expand(known)
    elif slot_known_hosts:
        known_hosts = _expand(slot_known_hosts, base_dir)
    else:
        listed = entry.get("userknownhostsfile")
        first = listed.split()[0] if isinstance(listed, str) and listed.strip() else None
        known_hosts = _expand(first or "~/.ssh/known_hosts")
    port = host.port or int(str(entry.get("port") or 22))
    user = host.user or (str(entry["user"]) if entry.get("user") else None)
    hostname = str(entry.get("hostname") or host.hostname)
    proxy = entry.get("proxycommand")
    return SshParams(
        hostname=hostname,
        port=port,
        username=user,
        key_filenames=identities,
        proxy_command=str(proxy) if proxy else None,
        known_hosts=known_hosts,
    )


class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    def __init__(self, host: HostAddress, known_hosts: Path) -> None:
        self.host, self.known_hosts = host, known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise UnknownHostKey(
            self.host.name,
            self.host.hostname or self.host.name,
            self.host.port,
            key.get_name(),
            f"{hostname} {key.get_name()} {key.get_base64()}",
            fingerprint(key),
            str(self.known_hosts),
        )


def open_ssh(host: HostAddress, params: SshParams, timeout: float = 15.0) -> paramiko.SSHClient:
    """A verified, authenticated SSH connection to ``host`` (raises HostKeyRefused or
    BackendError; never adds a key anywhere)."""
    client = paramiko.SSHClient()
    try:
        client.load_system_host_keys(str(params.known_hosts))
    except FileNotFoundError:
        pass  # no file: every host is unknown
    except (OSError, paramiko.SSHException) as exc:
        raise BackendError(f"cannot read known_hosts {params.known_hosts}: {exc}") from exc
    client.set_missing_host_key_policy(_RefuseUnknown(host, params.known_hosts))
    sock = paramiko.ProxyCommand(params.proxy_command) if params.proxy_command else None
    who = f"{params.username + '@' if params.username else ''}{params.hostname}:{params.port}"
    try:
        client.connect(
            params.hostname,
            port=params.port,
            username=params.username,
            key_filename=cast(Any, list(params.key_filenames) or None),
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            sock=sock,
        )
    except HostKeyRefused:
        client.close()
        raise
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostKeyMismatch(
            host.name,
            host.hostname or host.name,
            (exc.key.get_name(), fingerprint(exc.key)),
            (exc.expected_key.get_name(), fingerprint(exc.expected_key)),
            str(params.known_hosts),
        ) from exc
    except paramiko.AuthenticationException as exc:
        client.close()
        raise BackendError(
            f"host {host.name}: SSH authentication as {who} failed ({exc}) (hint: load the key "
            f"into ssh-agent, or name it with IdentityFile in the SSH config)"
        ) from exc
    except (TimeoutError, paramiko.SSHException, OSError) as exc:
        client.close()
        raise BackendError(f"host {host.name}: cannot connect over SSH to {who}: {exc}") from exc
    return client
