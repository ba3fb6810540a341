"""A blue-green host moves only once its Service lists the pods its Deployment has ready
(an ingress controller routes from EndpointSlices, written after the pods turn ready)."""

from __future__ import annotations

import pytest
from lightkube.models.core_v1 import ServicePort, ServiceSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Service
from lightkube.resources.discovery_v1 import EndpointSlice

from shipway.backends.kubernetes.endpoints import ready_addresses, wait_listed
from shipway.engine.outcome import Rolled
from shipway.errors import BackendError

from .conftest import Lines, Slot

pytestmark = pytest.mark.k8s


def test_the_wait_returns_once_the_service_lists_the_ready_pods_and_fails_when_it_never_does(
    slot: Slot,
) -> None:
    app = slot.write()
    outcome, lines = slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    ready = slot.deployment("shop-web").status.readyReplicas
    assert ready

    said = Lines()
    wait_listed(slot.client, slot.namespace, "shop-web", "shop-web", said)
    slices = list(
        slot.client.list(
            EndpointSlice,
            namespace=slot.namespace,
            labels={"kubernetes.io/service-name": "shop-web"},
        )
    )
    assert len(ready_addresses(slices)) >= ready  # returned only once they were listed

    # a Service that selects none of the Deployment's pods never lists them: bounded, said
    slot.client.create(
        Service(
            metadata=ObjectMeta(name="selects-nothing", namespace=slot.namespace),
            spec=ServiceSpec(selector={"app": "no-such-pod"}, ports=[ServicePort(port=80)]),
        )
    )
    said = Lines()
    with pytest.raises(BackendError, match=rf"lists 0 of the {ready} pod\(s\)"):
        wait_listed(slot.client, slot.namespace, "selects-nothing", "shop-web", said, timeout=1)
    assert "waiting for Service selects-nothing to list its" in said.text


def test_a_deployment_with_no_ready_pod_or_none_at_all_is_not_waited_for(slot: Slot) -> None:
    said = Lines()
    wait_listed(slot.client, slot.namespace, "absent", "absent", said, timeout=0.1)
    assert said.text == ""
