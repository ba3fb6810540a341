"""The drain of an old container after its host's proxy switched away from it.

Caddy's reload is graceful: requests the old config had already sent to a container finish
there, and since Caddy 2.6 the reload returns without waiting for them. The reload does not
close the old config's kept-alive connections to its upstreams, but the proxy closes any
after 1 s unused (:data:`.caddy.UPSTREAM_IDLE`). So once no connection to the container's
port is open, no request is on its way to it, and the drain ends: within about 1 s of the
last request for an app that keeps its connections alive, at once for one that closes them
after each answer. ``drain_timeout`` stays the longest it waits. Connections that stay open are
given that long, as before: a WebSocket, a long download, a client of its own kept alive.

The container's connections are read from its own ``/proc/net/tcp`` and ``tcp6`` (an
``exec`` of ``cat``, which the image may not have), from the output's first byte
(:mod:`.execs`: docker-py's own read lost a start that came with the answer's head, and a
table without its lines read as no connection). Where they cannot be read, the drain is the
whole window. What must never happen: a container stopped while a connection to it
is open and the window has not passed.
"""

from __future__ import annotations

import time

import docker.errors
from docker.models.containers import Container

from shipway.backends.docker.execs import exec_output
from shipway.backends.docker.retrying import transient_call
from shipway.backends.docker.state import name_of
from shipway.backends.protocol import Reporter
from shipway.backends.retry import RetryPolicy

#: how often the container's connections are read again while some are open
PACE = 0.05

#: TCP states (``/proc/net/tcp``'s ``st``, hex) in which a request may still be answered:
#: ESTABLISHED, SYN_RECV, CLOSE_WAIT (the client closed; the server has not yet)
OPEN_STATES = frozenset({"01", "03", "08"})

#: printed before and after both tables: its one line (``Linux``) at each end shows the
#: output came whole. A read cut short (a connection to the engine closed part way), or one
#: whose start was lost, is a table that lacks lines, which would count as no connection and
#: stop the container mid-request
END = "/proc/sys/kernel/ostype"

#: cat of both files: one whose kernel has no IPv6 still prints the first (and the ends)
READ = ["cat", END, "/proc/net/tcp", "/proc/net/tcp6", END]

#: how many times a read cut short is made again before the connections count as unreadable
WHOLE_TRIES = 3


def whole(text: str) -> bool:
    """Whether ``cat``'s output of :data:`READ` began and ended with :data:`END`'s line."""
    return text.startswith("Linux\n") and text.endswith("Linux\n")


def open_connections(table: str, port: int) -> int | None:
    """How many connections to local ``port`` are open in ``/proc/net/tcp``-format text
    (both files concatenated); None when the text is not such a table."""
    if "local_address" not in table:
        return None
    count = 0
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[1]:
            continue  # a header line, or cat's complaint about a missing file
        try:
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
        except ValueError:
            continue
        if local_port == port and fields[3] in OPEN_STATES:
            count += 1
    return count


def read_connections(
    container: Container, port: int, retry: RetryPolicy | None = None
) -> int | None:
    """The open connections to ``port`` in the container's own network namespace; None
    when they cannot be read (no ``cat`` in its image, the exec refused, the output cut
    short :data:`WHOLE_TRIES` times). ``retry``: how the look (a read, safe to run twice)
    is run again after a connection fault."""
    if container.client is None:
        return None
    api = container.client.api

    def look() -> bytes:
        made = api.exec_create(str(container.id), READ, stdout=True, stderr=False)
        return exec_output(api, made["Id"])

    for _ in range(WHOLE_TRIES):
        try:
            output = retry.call(look, transient_call) if retry is not None else look()
        except docker.errors.APIError as exc:
            if exc.status_code == 409 and "not running" in str(exc.explanation or ""):
                return 0  # it exited meanwhile: no connection to it is left
            return None
        # the exit status is not asked for (a call less): the output is such a table, or not
        text = output.decode(errors="replace")
        count = open_connections(text, port)
        if count is None or whole(text):
            return count
    return None  # cut short every time: unreadable this time, not "no connection"


def drain(
    container: Container,
    port: int,
    until: float,
    where: str,
    reporter: Reporter,
    retry: RetryPolicy | None = None,
) -> None:
    """Wait until no connection to ``container``'s ``port`` is open, or until ``until``
    (``time.monotonic()``) has passed."""
    shown = False
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return
        count = read_connections(container, port, retry)
        if count == 0:
            if shown:
                reporter.line(f"drained {name_of(container)} on {where}: no connection left")
            return
        left = until - time.monotonic()
        if count is None and shown:
            # read before: this look failed (an exec refused or cut off on a loaded host),
            # not the image; look again at the same pace instead of waiting out the window
            time.sleep(min(PACE, max(left, 0)))
            continue
        if count is None:
            if left > 0:
                reporter.line(
                    f"draining {name_of(container)} on {where}: {left:.1f}s left of the window "
                    "(its connections cannot be read: no cat in its image?)"
                )
                time.sleep(left)  # the drain window itself, not a stand-in for a condition
            return
        if not shown:
            plural = "" if count == 1 else "s"
            reporter.line(
                f"draining {name_of(container)} on {where}: {count} connection{plural} open, "
                f"waiting up to {max(left, 0):.1f}s"
            )
            shown = True
        time.sleep(min(PACE, max(left, 0)))  # the pace of looking again
