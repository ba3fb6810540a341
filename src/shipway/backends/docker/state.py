"""The typed state of the Docker backend, and the plumbing every part of it shares.

What must never happen here: a host the slot does not list being talked to, a library
exception escaping (:func:`~shipway.backends.docker.edge.edge` translates them), or a
mutation after the slot's lock was lost (:meth:`DockerState._still_ours`, the last check of
the one preamble :meth:`~shipway.backends.guarded.Guarded._guard`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

import docker
import docker.errors
from docker.models.containers import Container

from shipway.backends.docker import labels, render
from shipway.backends.docker.connection import HostConnection
from shipway.backends.docker.edge import edge
from shipway.backends.docker.machines import HostAddress, addresses
from shipway.backends.docker.records import RecordIndex, RecordStore
from shipway.backends.guarded import Guarded
from shipway.backends.protocol import Reporter
from shipway.backends.retry import RetryPolicy
from shipway.errors import BackendError, InputError
from shipway.spec.model import App, Slot, Target

if TYPE_CHECKING:  # lock.py's part derives from this class
    from shipway.backends.docker.lock import SlotLock

T = TypeVar("T")
#: the most hosts talked to at once (threads, each with its own Engine API connection)
MAX_FAN_OUT = 16
#: SSH channels opened ahead on each other host (the gate's events stream, an exec's output
#: and the calls beside them each hold one)
WARM_CHANNELS = 3


def tags_of(c: Container) -> dict[str, str]:
    """A container's labels, from a sparse listing (``Labels``) or an inspection."""
    listed = c.attrs.get("Labels")
    return dict(listed) if isinstance(listed, dict) else dict(c.labels)


def name_of(c: Container) -> str:
    """A container's name, from a sparse listing (``Names``) or an inspection."""
    names = c.attrs.get("Names")
    if isinstance(names, list) and names:
        return str(names[0]).lstrip("/")
    return str(c.name)


class DockerState(Guarded):
    """One app's slot on its Docker hosts: the hosts' connections (opened on first use),
    what the current operation did on each host, and the slot's lock while it is held.
    Every part of :class:`~shipway.backends.docker.backend.DockerBackend` derives from it."""

    def __init__(self, app: App, slot: Slot, environ: Mapping[str, str] | None = None) -> None:
        self.app, self.slot = app, slot
        #: the environment shipway runs in (an accessory's image mirror is read from it)
        self.environ: Mapping[str, str] = environ if environ is not None else os.environ
        self.settings = render.Settings.of(slot)
        self.host_addresses: list[HostAddress] = addresses(slot.hosts)
        if not self.host_addresses:
            raise InputError(f"slot {slot.name!r} lists no docker hosts")
        #: how every Engine API call is tried again (:mod:`.retrying`)
        self.retry = RetryPolicy()
        self.connections = {
            h.name: HostConnection(
                h,
                known_hosts=slot.known_hosts,
                base_dir=app.source_dir,
                environ=environ,
                policy=self.retry,
            )
            for h in self.host_addresses
        }
        self.primary = self.host_addresses[0].name
        #: host -> time.monotonic() of its proxy's last route switch (drain starts there)
        self._switched_at: dict[str, float] = {}
        #: host -> this slot's own proxy of before the shared one, as the last observe saw
        self._per_slot: dict[str, str] = {}
        #: (host, unit key) -> its container as the observation listed it (labels, state),
        #: until a step applies that key: a removal does not list what was just listed
        self._listed: dict[tuple[str, str], Container] = {}
        #: what proxies' files said while the slot's lock is held and no step of this
        #: backend has changed anything since (:meth:`_forget_looks`): "host proxy-id" ->
        #: the host names its routes answer for, and whose (:mod:`.hosts`); the proxies
        #: whose whole slots.json has no part of this slot's (:mod:`.proxy`)
        self._served_names: dict[str, dict[str, list[tuple[str, str]]]] = {}
        self._no_part: set[str] = set()
        #: the records as read and written while this backend holds the slot's lock (None:
        #: not known, as before the lock's first read of them)
        self._record_index: RecordIndex | None = None
        #: unit key -> why it differs from its body (from the last observe)
        self.drift: dict[str, list[str]] = {}
        #: host -> what this operation did there, in order (the per-host report)
        self.journal: dict[str, list[str]] = {}
        #: something failed during the current operation (the report is printed at its end)
        self._trouble = False
        #: the slot's lock while this backend holds it (every mutation checks it first)
        self._slot_lock: SlotLock | None = None
        #: the primary host's insecure registries (asked once, when the registry is read)
        self._insecure: tuple[str, ...] | None = None

    # -- plumbing ----------------------------------------------------------------------

    def report_retries(self, reporter: Reporter) -> None:
        self.retry.reporter = reporter

    def _conn(self, host: str | None) -> HostConnection:
        if host is None or host not in self.connections:
            raise BackendError(
                f"host {host!r} is not one of slot {self.slot.name!r}'s hosts "
                f"({', '.join(self.connections)})"
            )
        return self.connections[host]

    def _client(self, host: str | None) -> docker.DockerClient:
        conn = self._conn(host)
        with edge(f"host {conn.name}"):
            return conn.client()

    @contextlib.contextmanager
    def _records(self, what: str) -> Iterator[RecordStore]:
        """The release records on the primary host, for one call (``what``: read, write,
        delete) inside the edge. Under the lock a read starts the index of them that later
        writes use (:class:`RecordStore`); a call that fails forgets it."""
        client = self._client(self.primary)
        if what == "read":
            self._record_index = {} if self._slot_lock is not None else None
        try:
            with edge(f"host {self.primary}: {what} release records"):
                yield RecordStore(client, self.app.name, self.slot.name, self._record_index)
        except BaseException:
            self._record_index = None
            raise

    def _forget_looks(self) -> None:
        """Forget what proxies' files said (the lock taken or let go, or a step changes
        something): they are read again when next asked."""
        self._served_names.clear()
        self._no_part.clear()

    def _note(self, host: str | None, text: str) -> None:
        self.journal.setdefault(host or "?", []).append(text)

    def host_report(self) -> list[str]:
        """What this operation did on each host, in order (the per-host report)."""
        out = []
        for h in self.host_addresses:
            done = self.journal.get(h.name)
            out.append(f"host {h.name}: " + ("; ".join(done) if done else "nothing done"))
        return out

    def _still_ours(self, target: Target) -> None:
        """Refuse to mutate once the lock this backend holds is lost or was not renewed
        within its TTL (someone may have broken it and started an operation of their own).

        Docker keeps its own wording of the refusal (the slot, the lock's host, what to do
        next; docs/docker.md and the tests quote it), so :class:`SlotLock` raises it rather
        than ``_lock_problem`` giving a reason for the generic one."""
        if self._slot_lock is not None:
            self._slot_lock.check()

    def _connect_others(self) -> None:
        """Open every other host's connection in the background (an SSH handshake and the
        engine's API version take a second or more): the operation's first call on a host
        then finds it open, or waits for it (a failure is raised there, by :meth:`_client`).
        Every host, the first one too, gets a few SSH channels opened ahead of need."""

        def connect(conn: HostConnection) -> None:
            with contextlib.suppress(Exception):
                conn.warm(WARM_CHANNELS)

        for h in self.host_addresses:
            threading.Thread(target=connect, args=(self.connections[h.name],), daemon=True).start()

    def fan_out(self) -> int:
        """Hosts whose steps run at once: all of them, or the slot's ``batch`` (the plan
        rolls a batch at a time; :mod:`shipway.plan.rollout`)."""
        return min(len(self.host_addresses), self.slot.batch or MAX_FAN_OUT, MAX_FAN_OUT)

    def _each_host(
        self, work: Callable[[HostConnection], T], only: Collection[str] | None = None
    ) -> dict[str, T]:
        """Run ``work`` on every host (or those in ``only``) at once; the first error (in
        host order) is raised."""
        names = [h.name for h in self.host_addresses if only is None or h.name in only]
        if not names:
            return {}
        with ThreadPoolExecutor(max_workers=min(len(names), MAX_FAN_OUT)) as pool:
            futures = {name: pool.submit(work, self.connections[name]) for name in names}
            return {name: f.result() for name, f in futures.items()}

    def _labelled(
        self, client: docker.DockerClient, kind: str | None = None, sparse: bool = False
    ) -> list[Container]:
        """The slot's containers on a host. ``sparse``: as the one list call gives them
        (labels, state, ids) — docker-py otherwise inspects each one, a call apiece."""
        found: list[Container] = client.containers.list(
            all=True, filters=labels.slot_filter(self.app.name, self.slot.name, kind), sparse=sparse
        )
        return found

    def _by_key(self, client: docker.DockerClient, key: str) -> Container | None:
        """The container of a unit key, as the list gives it (sparse: read its labels with
        :func:`tags_of`, its name with :func:`name_of`)."""
        filters = labels.slot_filter(self.app.name, self.slot.name)
        filters["label"].append(f"{labels.KEY}={key}")
        found: list[Container] = client.containers.list(all=True, filters=filters, sparse=True)
        return found[0] if found else None

    def _get(self, client: docker.DockerClient, name: str) -> Container | None:
        try:
            return client.containers.get(name)
        except docker.errors.NotFound:
            return None

    def close(self) -> None:
        """Close every host's API clients and SSH connection (harmless twice)."""
        for conn in self.connections.values():
            conn.close()
