"""``ports.json``: the loopback ports handed to the program instances of one state directory.

A port handed out stays taken while its program is recorded, even while an instance is
down for a moment (it comes back on the same port: the router points there), so no two
programs of the state dir — of any app or slot — are ever given the same one. And a port
is given back when its program is not recorded any more: before a slot is given new ports,
its entries are rebuilt from its program records, so a port taken by a run killed before it
recorded its program (or held by a program stopped unrecorded) does not stay taken forever.

:class:`PortTable` is the file's one owner: nothing else reads or writes it. Every change
is made under ``ports.lock`` (slots of one state dir deploy concurrently) and written
atomically. The file: ``{"version": 1, "ports": {"<port>": "<owner>"}}``, the owner being
the instances' name prefix ``sw.<app>.<slot>.<process>.<deployment id>``.

The ports come from 10000-19999 (``SHIPWAY_LOCAL_PORTS=LOW-HIGH`` sets another span), below
the kernel's ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999 by default),
each checked free by binding it on every address. A port of the ephemeral range (``bind``
to port 0) could be taken between its allocation and the program's start by anything else
on the machine: an outgoing connection's own port, another program's ``bind`` to port 0,
Docker publishing a container's port. Then the program cannot bind it, or worse, its health
check reaches whatever took it (seen: a Docker proxy answering the gate's ``GET /up`` with
``404``). A span that reaches into the ephemeral range is cut where that range starts.
"""

from __future__ import annotations

import itertools
import random
import socket
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

from shipway.backends.local.dirs import file_lock
from shipway.backends.local.records import RecordFile
from shipway.errors import BackendError, InputError

PORTS: RecordFile[str] = RecordFile("ports", str, str)
SPAN_ENV = "SHIPWAY_LOCAL_PORTS"
DEFAULT_SPAN = range(10000, 20000)
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_start(path: Path = EPHEMERAL) -> int:
    """Where the kernel's ephemeral ports begin (32768 where it does not say)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_span(environ: Mapping[str, str], below: int) -> range:
    """The ports the programs are given: ``SHIPWAY_LOCAL_PORTS`` (``LOW-HIGH``, both
    included) or 10000-19999, cut to end ``below`` the ephemeral range."""
    raw = environ.get(SPAN_ENV, "").strip()
    span = DEFAULT_SPAN
    if raw:
        low, sep, high = raw.partition("-")
        try:
            span = range(int(low), int(high) + 1) if sep else range(0)
        except ValueError:
            span = range(0)
        if not span or span.start < 1024 or span.stop > 65536:
            raise InputError(
                f"{SPAN_ENV}={raw!r} is not a span of ports: write LOW-HIGH, both from "
                "1024 to 65535 and LOW first (e.g. 10000-19999)"
            )
    cut = range(span.start, min(span.stop, below))
    if not cut:
        what = f"{SPAN_ENV}={raw!r}" if raw else f"the default span {span.start}-{span.stop - 1}"
        raise InputError(
            f"{what}: no port of it is below the kernel's ephemeral ports (from {below}, "
            f"net.ipv4.ip_local_port_range); set {SPAN_ENV}=LOW-HIGH to a span below them"
        )
    return cut


def bindable(port: int, host: str) -> bool:
    """Nothing holds ``port`` at ``host`` now: a bind to it succeeds (and is let go)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:  # in use, or a connection of it still closing
            return False
    return True


def owner_prefix(app: str, slot: str) -> str:
    """How the instances (and so the ports) of one app's slot are named: ``sw.<app>.<slot>.``"""
    return f"sw.{app}.{slot}."


class PortTable:
    def __init__(
        self, root: Path, reserved: Collection[int] = (), span: range = DEFAULT_SPAN
    ) -> None:
        self.path = root / "ports.json"
        self.lock = root / "ports.lock"
        self.reserved = frozenset(reserved)  # never handed out (the router's port)
        self.span = span

    def taken(self) -> dict[int, str]:
        """port -> owner, as the file says now."""
        return {int(p): owner for p, owner in PORTS.read(self.path).items()}

    def _write(self, taken: dict[int, str]) -> None:
        PORTS.write(self.path, {str(p): taken[p] for p in sorted(taken)})

    def allocate(self, count: int, owner: str) -> list[int]:
        """``count`` fresh loopback ports for ``owner``: free now, and never one already
        handed to another program of this state directory."""
        with file_lock(self.lock):
            taken = self.taken()
            out: list[int] = []
            # from a random place in the span: another state directory allocating at the
            # same moment most likely starts elsewhere
            start = random.randrange(len(self.span))
            order = itertools.chain(self.span[start:], self.span[:start])
            for _ in range(count):
                port = next((p for p in order if self._free(p, taken)), None)
                if port is None:
                    raise BackendError(
                        f"no free loopback port in {self.span.start}-{self.span.stop - 1} "
                        f"(set {SPAN_ENV}=LOW-HIGH to another span)"
                    )
                taken[port] = owner
                out.append(port)
            self._write(taken)
        return out

    def _free(self, port: int, taken: Mapping[int, str]) -> bool:
        # on every address: a program may bind 0.0.0.0 (gunicorn --bind 0.0.0.0:$PORT),
        # which fails where anything listens on the port at any one address
        return port not in taken and port not in self.reserved and bindable(port, "0.0.0.0")

    def release(self, ports: Iterable[int]) -> None:
        """Give ports back (their instances are stopped)."""
        drop = set(ports)
        if not drop:
            return
        with file_lock(self.lock):
            taken = self.taken()
            self._write({p: o for p, o in taken.items() if p not in drop})

    def rebuild(self, prefix: str, recorded: dict[int, str]) -> list[int]:
        """Make the entries of one slot (owners starting with ``prefix``) exactly the ports
        its program records hold (``recorded``: port -> owner); the other slots' entries are
        kept as they are. Returns the ports given back: taken by an allocation whose program
        was never recorded (a ``kill -9`` in between) or by a program stopped unrecorded.

        Call it only under the slot's lock, when every port the slot was given is recorded
        (the local backend records a program right after it allocates its ports)."""
        with file_lock(self.lock):
            taken = self.taken()
            mine = {p for p, o in taken.items() if o.startswith(prefix)}
            leaked = sorted(mine - set(recorded))
            wanted = {p: o for p, o in taken.items() if p not in mine}
            for port, owner in recorded.items():
                wanted.setdefault(port, owner)  # never another slot's port
            if wanted != taken:
                self._write(wanted)
        return leaked
