"""Ports for the listeners the tests start: the local router, a Docker slot's proxy, …

A test picks a free port and hands it to a process that binds it later (often seconds later,
on a loaded machine). Port 0's choice comes from the kernel's ephemeral range, which every
outgoing connection and every other ``bind(port 0)`` on the machine draws from too: with
several pytest-xdist workers, each starting routers and opening connections, a port handed
out that way can be taken before it is bound. So the ports come from below the ephemeral
range (32768-60999 on Linux): 20000-31999, one band of 1000 per worker (a run without
workers: 20000-20999; worker ``gwN``: the band N + 1), each handed out once in turn from a
random start (another run at the same time starts elsewhere in the band) and checked by
binding it. The local backend's programs take theirs from 10000-19599 in the same way
(``SHIPWAY_LOCAL_PORTS``, set per worker by tests/conftest.py: :func:`program_ports`).
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Iterator

from shipway.backends.local.ports import bindable

BASE = 20000
BAND = 1000
BANDS = 12
#: the local backend's programs' ports (``SHIPWAY_LOCAL_PORTS``): 10000-19599, a span of
#: 800 per worker in the same order as the bands above
PROGRAM_BASE = 10000
PROGRAM_SPAN = 800

_ports: Iterator[int] | None = None


def _index() -> int:
    """0 without workers, N + 1 for worker ``gwN``, wrapped to the bands there are."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", … or unset
    number = worker.removeprefix("gw")
    return (int(number) + 1 if worker.startswith("gw") and number.isdigit() else 0) % BANDS


def band() -> range:
    """This process's ports: the band of its pytest-xdist worker."""
    start = BASE + _index() * BAND
    return range(start, start + BAND)


def program_ports() -> str:
    """``SHIPWAY_LOCAL_PORTS`` for this worker: the local backend's programs get their ports
    from this span, which no other worker's programs and no test's listener use."""
    start = PROGRAM_BASE + _index() * PROGRAM_SPAN
    return f"{start}-{start + PROGRAM_SPAN - 1}"


def free_port(host: str = "127.0.0.1") -> int:
    """A port of this worker's band that nothing listens on at ``host`` now."""
    global _ports
    if _ports is None:
        ports = band()
        start = random.randrange(len(ports))
        _ports = itertools.cycle([*ports[start:], *ports[:start]])
    for _ in range(BAND):
        port = next(_ports)
        if bindable(port, host):  # else in use (or still in TIME_WAIT): the next one
            return port
    raise RuntimeError(f"no free port in {band()} on {host}")
