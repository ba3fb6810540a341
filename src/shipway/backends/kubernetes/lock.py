"""The slot's lock as the protocol holds it: the slot's Lease (:mod:`.lease`) taken for one
operation, renewed while it runs, released on every exit path.

While the lock is held the operation's watches are open, started before the first apply
so that pods which exist then count as the old ones (their earlier exits are not held
against the new release). Losing the Lease wakes every wait, which then stops (LockLost).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx2
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.core.exceptions import ApiError
from lightkube.resources.coordination_v1 import Lease

from shipway.backends import retry
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.lease import LeaseTiming, SlotLease
from shipway.backends.kubernetes.retrying import RetryingClient
from shipway.backends.kubernetes.state import KubernetesState
from shipway.backends.protocol import LockHolder, Reporter
from shipway.guard import Clearance
from shipway.spec.model import Target


class KubernetesLock(KubernetesState):
    """``lock``: hold the slot's Lease for the block."""

    @contextlib.contextmanager
    def lock(
        self, clearance: Clearance, target: Target, holder: LockHolder, reporter: Reporter
    ) -> Iterator[None]:
        self._guard(clearance, target)
        if self.retry.reporter is None:
            self.retry.reporter = reporter
        lease = SlotLease(
            self.client,
            self.namespace,
            self.app.name,
            self.slot.name,
            holder,
            reporter,
            ensure_namespace=lambda: self._ensure_namespace(reporter),
            renew_client=lambda: self._renewal_client(holder),
        )
        lease.on_lost = self._wake_waits
        with self._edge(f"taking the lock of {target}"):
            lease.acquire()
        self.lease = lease
        try:
            lease.start_renewing()
            # Watch from before the first apply: pods that exist now are the old ones,
            # and exits they had before this operation are not held against them.
            with self._edge(f"watching the workloads of {target}"):
                self._start_session()
            yield
        finally:
            self._end_session()
            self.lease = None
            try:
                lease.release()
                if self._lease_doomed:  # the slot was destroyed: its Lease goes too
                    self._lease_doomed = False
                    self._delete_lease(lease.name)
            except (ApiError, httpx2.HTTPError) as exc:
                reporter.line(
                    f"warning: releasing the lock of {target} failed ({exc}); it expires by "
                    f"itself at the latest {lease.duration}s after its last renewal"
                )

    def _renewal_client(self, holder: LockHolder) -> Any:
        """The renewing thread's own client. Its retries fit in one renewal interval, so a
        renewal that keeps failing is tried afresh at the next tick rather than piling up
        behind the Lease's expiry."""
        interval = max(0.5, LeaseTiming.of(holder.ttl).retry)  # client-go's 2 s of 15 s
        policy = retry.RetryPolicy(budget=interval, cap=interval / 2)
        policy.reporter = self.retry.reporter
        client = Client(
            config=self.client.config, namespace=self.namespace, field_manager=render.MANAGER
        )
        return RetryingClient(client, policy)

    def _delete_lease(self, name: str) -> None:
        try:
            self.client.delete(Lease, name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404:  # gone already: what destroy wanted
                raise

    def _ensure_namespace(self, reporter: Reporter) -> None:
        body = render.namespace_unit(self.namespace)
        with self._edge(f"creating namespace {self.namespace}"):
            self.client.apply(from_dict(render.with_digest(body)), force=True)
        reporter.line(f"created namespace {self.namespace}")
