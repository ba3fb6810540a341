"""Traffic through a rollout, on the test plane's real node: not one request may fail.

A bounded loop of requests (one client, back to back, a new connection each) runs from this
host through a Service's ClusterIP (kube-proxy's rules take it to a pod) while shipway rolls
a release, rolls it back, or switches a blue-green slot's generation. What makes it hold is
in what shipway renders (docs/kubernetes.md, *Traffic during a rollout*): a stopping pod
keeps serving for its preStop sleep while it leaves the Service's endpoints, no old pod stops
before a new one is ready, and no pod is ready before its port answers.

The tests run one at a time (xdist group ``real_node_load``): the machine has two cores, and
two request loops beside two rollouts would measure the machine, not the rollout.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from lightkube import Client, KubeConfig
from lightkube.resources.core_v1 import Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.networking_v1 import Ingress

from shipway import api
from shipway.backends.kubernetes.render import ingress_name
from shipway.engine.outcome import Rolled
from tests.backends.local.conftest import eventually

from .conftest import Lines, Slot
from .test_real_pods import WEB, app_name, get, get_version_through_service, image

pytestmark = [pytest.mark.k8s, pytest.mark.real_node, pytest.mark.xdist_group("real_node_load")]

MAX_REQUESTS = 20_000  # the loop's bound: a rollout here takes well under that many


@dataclass
class Load:
    """What a request loop saw: answers by ``status body``, and each failure."""

    seen: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def check(self, before: str, after: str) -> None:
        print(f"requests: {sum(self.seen.values())} answered {dict(self.seen)}, failed "
              f"{len(self.failures)} {self.failures[:3]}")  # fmt: skip
        assert self.failures == [], (len(self.failures), self.failures[:3], dict(self.seen))
        # the loop spanned the change: it saw both releases answer
        assert self.seen.get(f"200 {before}") and self.seen.get(f"200 {after}"), dict(self.seen)


@contextmanager
def load(url: Callable[[], str]) -> Iterator[Load]:
    """Requests back to back, each to ``url()`` at that moment, until the block ends."""
    seen = Load()
    stop = threading.Event()

    def run() -> None:
        for _ in range(MAX_REQUESTS):
            if stop.is_set():
                return
            target = url()
            try:
                status, body = get(target)
                seen.seen[f"{status} {body.strip()}"] += 1
            except OSError as error:
                stamp = f"{time.strftime('%X')}.{int(time.time() * 1000) % 1000:03d}"
                seen.failures.append(f"{stamp} {target}: {error!r}")

    loader = threading.Thread(target=run, daemon=True)
    loader.start()
    try:
        yield seen
    finally:
        stop.set()
        loader.join(timeout=30)


def service_url(client: Client, name: str, namespace: str) -> str:
    service = client.get(Service, name, namespace=namespace)
    assert service.spec is not None and service.spec.ports
    return f"http://{service.spec.clusterIP}:{service.spec.ports[0].port}/version"


def deploy(slot: Slot, app: Any, image_ref: str) -> None:
    outcome, lines = slot.deploy(app, image=image_ref)
    assert isinstance(outcome, Rolled), lines.text


def test_a_rolling_update_and_a_rollback_under_load_fail_no_request(real_slot: Slot) -> None:
    name = app_name(real_slot)
    text = WEB.replace("replicas = 1", "replicas = 2")
    app = real_slot.write(text, name=name, image=image("v1"))
    deploy(real_slot, app, image("v1"))
    assert get_version_through_service(real_slot, name) == (200, "v1")
    url = service_url(real_slot.client, f"{name}-web", real_slot.namespace)

    with load(lambda: url) as rolled:
        deploy(real_slot, app, image("v2"))
        # the loop spans the change: it goes on until kube-proxy sends it to v2 (≤ 1 s)
        eventually(lambda: rolled.seen.get("200 v2"), what="v2 answering in the loop")
    rolled.check("v1", "v2")
    # the old pods serve out their preStop sleep while kube-proxy drops them (about 1 s)
    eventually(
        lambda: get_version_through_service(real_slot, name) == (200, "v2"), what="v2 alone"
    )

    lines = Lines()
    with load(lambda: url) as back:
        outcome = api.rollback(app, "test1", backend=real_slot.backend(app), reporter=lines)
        eventually(lambda: back.seen.get("200 v1"), what="v1 answering in the loop")
    assert isinstance(outcome, Rolled), lines.text
    back.check("v2", "v1")
    eventually(
        lambda: get_version_through_service(real_slot, name) == (200, "v1"), what="v1 alone"
    )


class Follower:
    """An in-cluster ingress controller reduced to one host, as NGINX's works: it watches
    the host's Ingress and the EndpointSlices of the namespace, and sends each request
    straight to a ready pod of the Service the Ingress names at that moment (round robin).
    A Service with no ready endpoint is a failed request (NGINX answers 503). The cluster of
    the tests runs no ingress controller; the pods' addresses are routed on this host."""

    def __init__(self, slot: Slot, ingress: str) -> None:
        self.client = Client(KubeConfig.from_file(slot.kubeconfig))
        self.namespace, self.ingress = slot.namespace, ingress
        self.service = ""
        self.routed_to: list[str] = []
        self.ready: dict[str, dict[str, list[str]]] = {}  # service → slice → addresses
        self.turn = 0
        self._stop = threading.Event()
        self._follow(self.client.get(Ingress, ingress, namespace=self.namespace))
        for slice_ in self.client.list(EndpointSlice, namespace=self.namespace):
            self._endpoints("ADDED", slice_)
        self._threads = [
            threading.Thread(target=self._run, args=(Ingress,), daemon=True),
            threading.Thread(target=self._run, args=(EndpointSlice,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _follow(self, ingress: Any) -> None:
        service = ingress.spec.rules[0].http.paths[0].backend.service.name
        if service != self.service:
            self.service = service
            self.routed_to.append(service)

    def _endpoints(self, kind: str, slice_: Any) -> None:
        service = (slice_.metadata.labels or {}).get("kubernetes.io/service-name", "")
        name = slice_.metadata.name
        slices = self.ready.setdefault(service, {})
        if kind == "DELETED" or not slice_.ports:
            slices.pop(name, None)
        else:
            slices[name] = _ready(slice_)

    def _run(self, kind: Any) -> None:
        fields = {"metadata.name": self.ingress} if kind is Ingress else None
        while not self._stop.is_set():
            for event, obj in self.client.watch(
                kind, namespace=self.namespace, fields=fields, server_timeout=5
            ):
                if kind is Ingress:
                    self._follow(obj)
                else:
                    self._endpoints(event, obj)
                if self._stop.is_set():
                    return

    def url(self) -> str:
        """Where the next request goes: a ready pod of the routed Service (none: nowhere).

        The two watches have no order between them: the Ingress's change can arrive before
        the slices' watch has told of the Service's ready pods (seen once, after a rollback:
        20 requests within 2 ms found the Service just routed to without one; the slices'
        watch comes back after each 5-s server timeout, the likely gap). So
        a Service with none is read again from the API server before a request fails: what
        shipway guarantees is that the API lists a Service's pods before a host moves to it
        (`wait_listed`), and that is what fails the request when it does not hold."""
        service = self.service
        addresses = sorted(a for s in self.ready.get(service, {}).values() for a in s)
        if not addresses:
            listed = self.client.list(
                EndpointSlice,
                namespace=self.namespace,
                labels={"kubernetes.io/service-name": service},
            )
            addresses = sorted(a for slice_ in listed if slice_.ports for a in _ready(slice_))
        if not addresses:
            return f"http://no-ready-endpoint-of.{service}.invalid/version"
        self.turn += 1
        return f"http://{addresses[self.turn % len(addresses)]}/version"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while not self.ready.get(self.service):
            assert time.monotonic() < deadline, f"no ready endpoint of {self.service}"
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


def _ready(slice_: Any) -> list[str]:
    """The ``address:port`` of each endpoint an EndpointSlice (with a port) lists ready."""
    port = slice_.ports[0].port
    return [
        f"{address}:{port}"
        for e in slice_.endpoints or []
        if e.conditions is not None and e.conditions.ready
        for address in e.addresses
    ]


BLUE_GREEN = """
strategy = "blue-green"
sleep_after = "2s"
routes = [{{ host = "{namespace}.example.com", process = "web" }}]
"""


def test_a_generation_switch_and_its_rollback_under_load_fail_no_request(
    real_slot: Slot,
) -> None:
    name = app_name(real_slot)
    app = real_slot.write(WEB + BLUE_GREEN, name=name, image=image("v1"))
    deploy(real_slot, app, image("v1"))
    follower = Follower(real_slot, ingress_name(name, f"{real_slot.namespace}.example.com"))
    try:
        first = follower.service
        follower.wait_ready()
        with load(follower.url) as switched:
            deploy(real_slot, app, image("v2"))
        switched.check("v1", "v2")
        assert follower.service != first, follower.routed_to  # the host moved

        lines = Lines()
        with load(follower.url) as back:
            outcome = api.rollback(app, "test1", backend=real_slot.backend(app), reporter=lines)
        assert isinstance(outcome, Rolled), lines.text
        back.check("v2", "v1")
        # back on the first generation, whose Service came back as it woke
        assert len(follower.routed_to) == 3 and follower.routed_to[2] == first, follower.routed_to
    finally:
        follower.stop()
