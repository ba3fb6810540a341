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
"""

from __future__ import annotations

import socket
from collections.abc import Collection, Iterable
from pathlib import Path

from shipway.backends.local.dirs import file_lock
from shipway.backends.local.records import RecordFile
from shipway.errors import BackendError

PORTS: RecordFile[str] = RecordFile("ports", str, str)
ATTEMPTS = 50


def owner_prefix(app: str, slot: str) -> str:
    """How the instances (and so the ports) of one app's slot are named: ``sw.<app>.<slot>.``"""
    return f"sw.{app}.{slot}."


class PortTable:
    def __init__(self, root: Path, reserved: Collection[int] = ()) -> None:
        self.path = root / "ports.json"
        self.lock = root / "ports.lock"
        self.reserved = frozenset(reserved)  # never handed out (the router's port)

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
            for _ in range(count):
                for _attempt in range(ATTEMPTS):
                    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                        s.bind(("127.0.0.1", 0))
                        port = int(s.getsockname()[1])
                    if port not in taken and port not in self.reserved:
                        break
                else:
                    raise BackendError("no free loopback port could be found")
                taken[port] = owner
                out.append(port)
            self._write(taken)
        return out

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
