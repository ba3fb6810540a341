"""Hosts on the real control plane: a rolling slot refuses a host another app's Ingress
serves unless told to take it, and taking it changes the other Ingress only as it was read
(its only rule: a delete with uid and resourceVersion preconditions, never an
unconditional one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from lightkube import ALL_NS, Client
from lightkube.core.exceptions import ApiError
from lightkube.resources.networking_v1 import Ingress

from shipway import api
from shipway.backends.kubernetes import render
from shipway.backends.kubernetes.backend import KubernetesBackend
from shipway.engine.outcome import Rolled
from tests.backends.kubernetes.conftest import Lines, Slot
from tests.backends.kubernetes.test_blue_green import (
    _paths,
    blue_green,
    deploy_blog,
    host,
    rolled,
)

pytestmark = pytest.mark.k8s


def rolling_route(slot: Slot) -> str:
    return f'routes = [{{ host = "{host(slot)}", process = "web" }}]'


def test_a_rolling_slot_refuses_a_host_another_app_serves_unless_taken(
    slot: Slot, k8s_namespaces: Callable[[], str]
) -> None:
    other = k8s_namespaces()
    deploy_blog(slot, other)
    blog = render.ingress_name("blog", host(slot))
    slot.write(slot_extra=rolling_route(slot))

    refused = slot.cli("deploy", "test1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert (
        f"host {host(slot)} is served by blog/test1 (Ingress {other}/{blog}); refusing to "
        "take it" in refused.stderr
    )
    assert slot.images() == {}  # nothing was made
    assert slot.cli("plan", "test1").returncode == 2  # the plan says so too

    out = rolled(slot.cli("deploy", "test1", "--take-host"))
    assert f"taking host {host(slot)} from blog/test1" in out
    assert f"took {host(slot)} from blog/test1" in out and "deleted its Ingress (only rule)" in out
    with pytest.raises(ApiError):
        slot.client.get(Ingress, blog, namespace=other)
    name = render.ingress_name("shop", host(slot))
    ours = slot.client.get(Ingress, name, namespace=slot.namespace)
    assert [r.host for r in ours.spec.rules] == [host(slot)]
    rolled(slot.cli("deploy", "test1", "--image", "registry.example/shop:2"))  # now it is ours


class Meddling(Client):  # type: ignore[misc]
    """A client whose second cluster-wide list of Ingresses (the take's) is followed, before
    anything is changed, by the other app adding a rule to its Ingress: the Ingress the take
    read is no longer the one in the cluster."""

    def __init__(self, meddle: Callable[[], None], **kw: Any) -> None:
        super().__init__(**kw)
        self.meddle = meddle
        self.lists = 0

    def list(self, res: Any, *args: Any, **kw: Any) -> Any:
        found = list(super().list(res, *args, **kw))
        if res is Ingress and kw.get("namespace") == ALL_NS:
            self.lists += 1
            if self.lists == 2:
                self.meddle()
        return found


def test_taking_an_only_rule_never_deletes_an_ingress_changed_since_it_was_read(
    slot: Slot, k8s_namespaces: Callable[[], str]
) -> None:
    other = k8s_namespaces()
    deploy_blog(slot, other)
    blog = render.ingress_name("blog", host(slot))
    extra = f"extra.{slot.namespace}.example.com"

    def meddle() -> None:  # blog adds a host to its Ingress just after the take read it
        theirs = slot.client.get(Ingress, blog, namespace=other).to_dict()
        rules = theirs["spec"]["rules"] + [{"host": extra, "http": _paths("blog-web")}]
        slot.client.patch(Ingress, blog, {"spec": {"rules": rules}}, namespace=other)

    app = slot.write(slot_extra=blue_green(slot))
    client = Meddling(meddle, config=slot.client.config, field_manager=render.MANAGER)
    backend = KubernetesBackend(app, app.slots.get("test1"), client=client)
    lines = Lines()
    try:
        outcome = api.deploy(app, "test1", backend=backend, reporter=lines, take_host=True)
    finally:
        backend.close()
    assert isinstance(outcome, Rolled), lines.text
    assert client.lists >= 2
    assert f"Ingress {other}/{blog} changed since it was read: reading it again" in lines.text
    # read again, the host was no longer its only rule: removed, and blog's new rule kept
    theirs = slot.client.get(Ingress, blog, namespace=other)
    assert [r.host for r in theirs.spec.rules] == [extra]
    took = [line for line in lines.lines if f"took {host(slot)} from blog/test1" in line]
    assert len(took) == 1 and took[0].endswith(": removed its rule"), lines.text
