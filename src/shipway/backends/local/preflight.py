"""Problems found before anything moves: the router port another program holds, and a
declared host name this machine will not answer to.

Both are read-only looks at this machine: binding a socket (closed at once) and reading
/proc (Linux: who listens on a port; elsewhere the holder is just "another program").
Nothing here starts or writes anything, so ``plan`` may call it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import threading
from pathlib import Path

from shipway.backends.local.render import hosts_of
from shipway.backends.local.router_control import RouterControl
from shipway.errors import InputError
from shipway.spec.model import App, Slot

#: how long a host name's lookup may take before it counts as not resolving here
RESOLVE_TIMEOUT = 1.0
_LISTEN = "0A"


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``host:port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def holder_of(port: int, proc: Path = Path("/proc")) -> str:
    """Who listens on TCP ``port``, in words: ``pid 1234 (nginx: master process)``, a
    user's process this user cannot see, or "another program" when /proc does not say."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return "another program"
    pid_dir = _holder_dir(inodes, proc)
    if pid_dir is not None:
        return f"pid {pid_dir.name} ({_command_of(pid_dir)})"
    uids = {uid for uid in inodes.values()}
    who = ", ".join(sorted(_user(uid) for uid in uids))
    return f"a process of {who} (not visible to this user)"


def holder_pid(port: int, proc: Path = Path("/proc")) -> int | None:
    """The pid of the process listening on TCP ``port`` (None: none, or not visible)."""
    pid_dir = _holder_dir(_listening_inodes(port, proc), proc)
    return int(pid_dir.name) if pid_dir is not None else None


def _holder_dir(inodes: dict[str, str], proc: Path) -> Path | None:
    """The /proc directory of the process holding one of these sockets."""
    if not inodes:
        return None
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (pid_dir / "fd").iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        return pid_dir
    return None


def _listening_inodes(port: int, proc: Path) -> dict[str, str]:
    """inode -> uid of the sockets listening on ``port`` (IPv4 and IPv6)."""
    found: dict[str, str] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                found[fields[9]] = fields[7]
    return found


def _command_of(pid_dir: Path) -> str:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    text = " ".join(words) or "?"
    return text if len(text) <= 120 else text[:119] + "…"


def _user(uid: str) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(int(uid)).pw_name}"
    except (KeyError, ValueError, ImportError):
        return f"uid {uid}"


def resolves_here(host: str) -> bool:
    """Whether ``host`` leads to this machine: a ``*.localhost`` name (RFC 6761: curl and
    browsers send it to loopback themselves), or one whose addresses are this machine's.
    A lookup slower than RESOLVE_TIMEOUT counts as not resolving here."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    found: list[list[str]] = []

    def lookup() -> None:
        with contextlib.suppress(OSError, UnicodeError):
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            found.append([str(info[4][0]) for info in infos])

    worker = threading.Thread(target=lookup, daemon=True)
    worker.start()
    worker.join(RESOLVE_TIMEOUT)
    if not found:
        return False
    return any(_is_local(address) for address in found[0])


def _is_local(address: str) -> bool:
    """An address a socket here can bind: one of this machine's own."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((address, 0))
        except OSError:
            return False
    return True


def curl_hint(host: str, port: int) -> str:
    return f"curl -H 'Host: {host}' http://127.0.0.1:{port}/"


def check_router_port(app: App, slot: Slot, router: RouterControl) -> None:
    """Refuse (InputError, nothing touched) a release whose hosts need a router port that
    another program holds: found while planning, not at the last step of a deploy. The
    slot's own router, still coming up, is waited for (until it answers, or says why not)."""
    if not hosts_of(app, slot) or router.answering() or port_is_free(router.port):
        return
    if router.holds_port(holder_pid(router.port)):
        router.wait_ready()
        return
    raise InputError(
        f"router port {router.port} is held by {holder_of(router.port)}, so slot "
        f"{slot.name!r} could not serve its hosts; nothing was changed (hint: stop that "
        f"program, or give the slot another port: SHIPWAY_ROUTER_PORT=… or "
        f"[slots.{slot.name}] router_port = …)"
    )


def unresolved_hosts(app: App, slot: Slot, port: int) -> list[str]:
    """A line for each declared host that will not reach this machine, with the curl
    command that reaches it anyway."""
    return [
        f"note: {host} does not resolve to this machine; to reach it: {curl_hint(host, port)}"
        for host, _ in hosts_of(app, slot)
        if not resolves_here(host)
    ]
