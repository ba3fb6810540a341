"""A Service's ready endpoints as an ingress controller sees them (its EndpointSlices).

A pod's Ready condition and the EndpointSlice that lists it as ready are written by two
controllers, one after the other: the Deployment counts a pod available before the
endpoints controller has listed it, by milliseconds or, on a loaded control plane, by
seconds. An ingress controller routes from the slices, so a host pointed at a Service as
soon as its pods are ready can meet a Service with no endpoint (NGINX answers 503). A
blue-green switch therefore waits here, bounded, until the Service lists every pod its
Deployment has ready.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.discovery_v1 import EndpointSlice

from shipway.backends.protocol import Reporter
from shipway.errors import BackendError

#: how long a Service may take to list pods its Deployment counts ready
LISTED_WAIT = 30.0
#: how often the slices are read again meanwhile
POLL = 0.2


def ready_addresses(slices: Iterable[Any]) -> set[str]:
    """The addresses the slices list as ready (an unset ``ready`` means ready, as the
    EndpointSlice API defines it)."""
    found: set[str] = set()
    for slice_ in slices:
        for endpoint in slice_.endpoints or []:
            conditions = endpoint.conditions
            if conditions is not None and conditions.ready is False:
                continue
            found.update(endpoint.addresses or [])
    return found


def wait_listed(
    client: Any,
    namespace: str,
    service: str,
    deployment: str,
    reporter: Reporter,
    timeout: float = LISTED_WAIT,
) -> None:
    """Return once Service ``service`` lists as many ready addresses as Deployment
    ``deployment`` has ready pods (at once when it has none: a generation asleep);
    raise :class:`BackendError` when it does not within ``timeout``. An identity that may
    not list EndpointSlices is told so and not waited for."""
    try:
        live = client.get(Deployment, deployment, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return  # nothing runs behind the Service: nothing to wait for
        raise
    want = int((live.status.readyReplicas if live.status else 0) or 0)
    if want == 0:
        return
    deadline = time.monotonic() + timeout
    said = False
    while True:
        try:
            slices = client.list(
                EndpointSlice,
                namespace=namespace,
                labels={"kubernetes.io/service-name": service},
            )
        except ApiError as exc:
            if exc.status.code != 403:
                raise
            reporter.line(
                f"  note: may not list EndpointSlices ({exc.status.message}): the host "
                f"moves without waiting for Service {service} to list its pods (the Role "
                "in docs/kubernetes.md grants list on endpointslices)"
            )
            return
        have = len(ready_addresses(slices))
        if have >= want:
            if said:
                reporter.line(f"  Service {service} lists its {want} ready pod(s)")
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise BackendError(
                f"Service {service} lists {have} of the {want} pod(s) its Deployment has "
                f"ready after {timeout:.0f}s: no host is pointed at it (hint: the endpoints "
                "controller — kube-controller-manager — is behind or not running)"
            )
        if not said:
            reporter.line(
                f"  waiting for Service {service} to list its {want} ready pod(s) ({have} so far)"
            )
            said = True
        time.sleep(min(POLL, left))
