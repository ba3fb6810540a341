"""A replica-ratio canary's held step (``split = "replicas"``): no router counts its
requests, so what the engine watches while it holds a share is the canary's pods — read
from the backend (:class:`~shipway.backends.canary.CanaryHealth`: the rollout watch's
signals, a crash loop, a readiness probe that fails, a pod that cannot start) at most every
``HEALTH_EVERY``; the decision is :func:`shipway.plan.replica_canary.held` (pure)."""

from __future__ import annotations

import time

from shipway.backends.canary import health_of
from shipway.backends.protocol import Backend, Failure
from shipway.plan.canary import Analysis
from shipway.plan.model import HoldCanary
from shipway.plan.replica_canary import held
from shipway.spec.model import Target

#: how often the canary's pods are read (two lists on the API server each time)
HEALTH_EVERY = 0.5


class PodWatch:
    """The canary's pods' health during its held steps, and the failure that aborted it."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.read_at = 0.0
        self.failure: Failure | None = None

    def decide(self, target: Target, step: HoldCanary, elapsed: float) -> Analysis:
        """The held step's decision now (the pods read again when HEALTH_EVERY passed)."""
        now = time.monotonic()
        if self.failure is None and now - self.read_at >= HEALTH_EVERY:
            self.read_at = now
            self.failure = health_of(self.backend).canary_health(target)
        sick = self.failure.message if self.failure is not None else None
        return held(step.percent, step.seconds, elapsed, sick, step.at_timeout)
