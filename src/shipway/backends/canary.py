"""The protocol part of a backend whose proxy runs a canary: it splits a host's requests
between two releases by weight, counts them per release, and keeps what the engine and a
person say about the canary. The decision is never the backend's: the engine makes it from
the counts (:mod:`shipway.plan.canary`, pure).

A part of its own, as generations and accessories are: a backend without it never sees a
canary plan — the spec is refused when it is read
(:data:`shipway.spec.canary.CANARY_BACKENDS`), and :func:`canaries_of` refuses it again. A
backend whose target may lack what splits and counts (Kubernetes: a Gateway API
implementation, a Prometheus) also says, before any plan, why a canary cannot run there
(:class:`CanaryPreflight`); the plan is then refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from shipway.backends.protocol import Backend, Failure, Reporter
from shipway.errors import BackendError, InputError
from shipway.guard import Clearance
from shipway.plan.canary import Tally
from shipway.release.model import Release
from shipway.spec.model import Target


@dataclass(frozen=True)
class CanaryCounts:
    """The proxy's counts of one canary now (since the proxy started counting it)."""

    canary: str  #: the canary's id: app.slot.r<revision>
    percent: int  #: the share of requests it gets now
    stable: Tally
    on_canary: Tally

    def to_json(self) -> dict[str, Any]:
        return {
            "canary": self.canary,
            "percent": self.percent,
            "stable": self.stable.to_json(),
            "on_canary": self.on_canary.to_json(),
        }


class CanaryNotReady(BackendError):
    """A share's canary whose processes failed the wait that gates it (a crash loop, an
    image that cannot be pulled …): ``failure`` is the wait's own, with its reason, exit
    code, events and log tail — the engine gives it as the step's failure."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.headline())
        self.failure = failure


def canary_id(release: Release) -> str:
    return f"{release.app}.{release.slot}.r{release.revision}"


@runtime_checkable
class Canaries(Protocol):
    def shift_traffic(
        self, clearance: Clearance, target: Target, release: Release, percent: int, r: Reporter
    ) -> None:
        """Send ``percent`` of the requests of every host ``release`` moves to its program,
        the rest to the program serving the host now; 0 takes every canary of the slot out
        of the proxy at once (every request to the stable). A canary whose processes fail
        the wait that gates a share: :class:`CanaryNotReady`."""
        ...

    def canary_counts(self, target: Target) -> CanaryCounts | None:
        """The counts of the slot's canary (None: no canary runs in the proxy)."""
        ...

    def canary_note(
        self, clearance: Clearance, target: Target, name: str, doc: Mapping[str, Any] | None
    ) -> None:
        """Keep (or, ``doc`` None, drop) a note about the canary: ``state`` (the engine's
        last analysis, for ``canary status``) or ``decision`` (a person's promote or abort,
        for the engine running it). Writing one needs a clearance for the slot."""
        ...

    def read_canary_note(self, target: Target, name: str) -> dict[str, Any] | None: ...


@runtime_checkable
class CanaryPreflight(Protocol):
    def canary_refusal(self, target: Target) -> str | None:
        """Why a canary cannot run in the target (None: it can). Read-only."""
        ...


@runtime_checkable
class CanaryStickiness(Protocol):
    def canary_keeps_clients(self, target: Target) -> bool:
        """Whether a client keeps the side of its first answer (a cookie the proxy sets);
        a backend without this part always keeps them. Read-only."""
        ...


def keeps_clients(backend: Backend, target: Target) -> bool:
    """Whether the backend's split keeps a client on its side (what the plan says)."""
    if not isinstance(backend, CanaryStickiness):
        return True
    return backend.canary_keeps_clients(target)


@runtime_checkable
class CanaryHealth(Protocol):
    def canary_health(self, target: Target) -> Failure | None:
        """A replica-ratio canary's pods now (``split = "replicas"``: no router counts its
        requests): the failure of one that crash-loops, fails its readiness probe or cannot
        start (with the pod's events and log tail), or None while they are healthy."""
        ...


def health_of(backend: Backend) -> CanaryHealth:
    """The backend as one that watches a replica-ratio canary's pods."""
    if not isinstance(backend, CanaryHealth):
        raise InputError(
            f'the {backend.name} backend runs no replica-ratio canary (split = "replicas" is '
            "for kubernetes slots)"
        )
    return backend


def refuse_unsplittable(backend: Backend, target: Target) -> None:
    """An InputError (exit 2) when the backend says a canary cannot run in the target."""
    if not isinstance(backend, CanaryPreflight):
        return
    why = backend.canary_refusal(target)
    if why:
        raise InputError(
            f"a canary cannot be run in slot {target.slot!r} on this {backend.name} target: {why}"
        )


def canaries_of(backend: Backend) -> Canaries:
    """The backend as one that runs canaries, or an InputError naming those that do."""
    if not isinstance(backend, Canaries):
        raise InputError(
            f"the {backend.name} backend does not run canary releases in this version of "
            "shipway (they run on local, docker and kubernetes slots) "
            '(hint: use strategy = "rolling" for this slot)'
        )
    return backend
