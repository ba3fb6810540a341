"""Whether a lock's holder process is gone — said only when the lock's record proves it.

A lock record names the machine and pid of its holder. A hostname and a pid alone prove
nothing: two containers can share a hostname, each in its own pid namespace, and pid 4242
in one is not pid 4242 in the other; a pid is also reused once its process has exited. So a
holder is marked (:class:`ProcessMark`) with the kernel's boot id, its pid namespace and its
process start time too, and it is judged gone only when the record was made by this very
kernel, in this very pid namespace, and no process with that pid and start time runs.

What must never happen: a live holder judged gone (its lock would be broken under it).
Whenever the record cannot prove it ran here — another machine, another container, a
record from before these marks — the answer is "cannot tell", and the lock is left to its
expiry.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs in this pid namespace."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True


def boot_id() -> str:
    """This kernel's boot id ("" where the system does not say)."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """The pid namespace this process runs in, e.g. ``pid:[4026531836]`` ("" unknown)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def process_start(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since boot ("" when there is none or
    the system does not say). With the boot id, it tells a pid's process from a later one
    that reused the pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name (field 2) is in parentheses and may hold spaces or ')'
    rest = stat[stat.rfind(")") + 2 :].split()
    return rest[19] if len(rest) > 19 else ""  # field 22, starttime


@dataclass(frozen=True)
class ProcessMark:
    """What proves which process holds a lock: host name, pid, and (on Linux) the boot id,
    the pid namespace and the process start time."""

    host: str
    pid: int
    boot: str = ""
    pid_ns: str = ""
    start: str = ""

    @classmethod
    def mine(cls) -> ProcessMark:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, boot_id(), pid_namespace(), process_start(pid))

    def gone(self) -> str | None:
        """Why the marked process is known to be gone (None: it runs, or it cannot be told
        from here)."""
        here = ProcessMark.mine()
        if self.host != here.host:
            return None
        if here.boot or here.pid_ns or self.boot or self.pid_ns:
            # a Linux record, or a Linux machine: only this kernel's pid namespace counts
            if not (self.boot and self.pid_ns):
                return None  # an older record: its pid may be another namespace's
            if (self.boot, self.pid_ns) != (here.boot, here.pid_ns):
                return None  # another machine or container with the same host name
        if self.pid == here.pid and self.start == here.start:
            return None  # this very process
        if not pid_alive(self.pid):
            return f"its process {self.pid} is gone from this machine"
        if self.start and process_start(self.pid) not in ("", self.start):
            return (
                f"its process {self.pid} is gone from this machine (that pid now belongs "
                "to another process)"
            )
        return None

    def runs_here(self) -> bool:
        """Whether the marked process provably still runs here: this kernel, this pid
        namespace, and its pid's process started when the mark says (never a pid reused
        by another process). What may be signalled on the mark's word."""
        here = ProcessMark.mine()
        if not (self.boot and self.pid_ns and self.start):
            return False
        if (self.host, self.boot, self.pid_ns) != (here.host, here.boot, here.pid_ns):
            return False
        return process_start(self.pid) == self.start


def session_members(sid: int, started_since: str) -> list[int]:
    """The processes of session ``sid`` (a command started in a session of its own: its
    children and grandchildren stay in it unless they leave) that started no earlier than
    ``started_since`` (clock ticks since boot) — a session id a later process reused holds
    only processes started after the mark, and is still told apart by the caller's mark."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) <= 19 or rest[3] != str(sid) or rest[0] == "Z":  # field 6: session id
            continue  # (a zombie has ended: only its parent's wait is left)
        if started_since and int(rest[19]) < int(started_since):
            continue
        out.append(int(entry))
    return sorted(out)
