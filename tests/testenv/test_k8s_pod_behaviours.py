"""Each simulated pod behaviour shows up in real pod status, selected by tag or annotation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from lightkube import Client
from lightkube.models.core_v1 import Container, ContainerStatus, PodSpec, ResourceRequirements
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Pod

from tests.testenv.k8s import (
    BEHAVIOUR_ANNOTATION,
    READY_AFTER_ANNOTATION,
    WaitTimeout,
    wait_for,
    wait_for_all,
)

pytestmark = pytest.mark.k8s


def make_pod(
    client: Client,
    namespace: str,
    behaviour: str,
    selector: str,
    *,
    annotations: dict[str, str] | None = None,
    restart_policy: str = "Always",
    cpu: str = "100m",
) -> str:
    """Create a pod whose behaviour is chosen by image ``tag`` or ``annotation``."""
    notes = dict(annotations or {})
    image = "app:1.0"
    if selector == "tag":
        image = f"app:{behaviour}"
    else:
        notes[BEHAVIOUR_ANNOTATION] = behaviour
    name = f"{behaviour}-{selector}"
    client.create(
        Pod(
            metadata=ObjectMeta(name=name, annotations=notes or None),
            spec=PodSpec(
                restartPolicy=restart_policy,
                containers=[
                    Container(
                        name="app",
                        image=image,
                        resources=ResourceRequirements(requests={"cpu": cpu, "memory": "32Mi"}),
                    )
                ],
            ),
        ),
        namespace=namespace,
    )
    return name


def condition(pod: Pod, kind: str) -> str | None:
    for c in (pod.status.conditions or []) if pod.status else []:
        if c.type == kind:
            return c.status
    return None


def in_phase(client: Client, namespace: str, name: str, phase: str, timeout: float) -> Pod:
    """The pod once its phase is ``phase`` (WaitTimeout after ``timeout`` seconds)."""
    return wait_for(
        client,
        Pod,
        name,
        lambda p: p.status is not None and p.status.phase == phase,
        namespace=namespace,
        timeout=timeout,
    )


def container(pod: Pod) -> ContainerStatus | None:
    statuses = pod.status.containerStatuses if pod.status else None
    return statuses[0] if statuses else None


@dataclass
class History:
    """What a watch saw of one pod's container, event by event."""

    states: list[str] = field(default_factory=list)
    restart_counts: list[int] = field(default_factory=list)
    ready: list[bool] = field(default_factory=list)

    def record(self, pod: Pod) -> None:
        cs = container(pod)
        if cs is None or cs.state is None:
            return
        if cs.state.running is not None:
            state = "running"
        elif cs.state.terminated is not None:
            state = f"terminated:{cs.state.terminated.reason}:{cs.state.terminated.exitCode}"
        elif cs.state.waiting is not None:
            state = f"waiting:{cs.state.waiting.reason}"
        else:
            return
        if not self.states or self.states[-1] != state:
            self.states.append(state)
        self.restart_counts.append(cs.restartCount)
        self.ready.append(cs.ready)


def watching(history: History, done: Callable[[Pod], bool]) -> Callable[[Pod], bool]:
    def check(pod: Pod) -> bool:
        history.record(pod)
        return done(pod)

    return check


def wait_for_event(client: Client, namespace: str, pod: str, reason: str) -> Event:
    """The kubelet's part: events about the pod (kwok posts them like a kubelet)."""

    def found(events: dict[str, Event]) -> Event | None:
        return next((e for e in events.values() if e.reason == reason), None)

    return wait_for_all(
        client,
        Event,
        found,
        namespace=namespace,
        fields={"involvedObject.name": pod},
        timeout=20,
        what=f"a {reason} event for pod {pod}",
    )


SELECTORS = ["tag", "annotation"]


@pytest.mark.parametrize("selector", SELECTORS)
def test_default_pod_is_running_and_ready_quickly(
    k8s_client: Client, k8s_namespace: str, selector: str
) -> None:
    name = make_pod(k8s_client, k8s_namespace, "default", selector)
    pod = wait_for(
        k8s_client,
        Pod,
        name,
        lambda p: condition(p, "Ready") == "True",
        namespace=k8s_namespace,
        timeout=10,
    )
    assert pod.status is not None and pod.status.phase == "Running"
    assert condition(pod, "PodScheduled") == "True"
    cs = container(pod)
    assert cs is not None and cs.ready and cs.started and cs.restartCount == 0
    assert cs.state is not None and cs.state.running is not None
    assert pod.status.podIP and pod.status.hostIP


@pytest.mark.parametrize("selector", SELECTORS)
def test_crashloop(k8s_client: Client, k8s_namespace: str, selector: str) -> None:
    name = make_pod(k8s_client, k8s_namespace, "crashloop", selector)
    history = History()

    def looped_twice(pod: Pod) -> bool:
        cs = container(pod)
        return (
            cs is not None
            and cs.restartCount >= 2
            and cs.state is not None
            and (cs.state.waiting is not None)
        )

    pod = wait_for(
        k8s_client,
        Pod,
        name,
        watching(history, looped_twice),
        namespace=k8s_namespace,
        timeout=30,
    )
    cs = container(pod)
    assert cs is not None and cs.state is not None and cs.state.waiting is not None
    assert cs.state.waiting.reason == "CrashLoopBackOff"
    assert cs.state.waiting.message and "back-off" in cs.state.waiting.message
    assert cs.lastState is not None and cs.lastState.terminated is not None
    assert cs.lastState.terminated.exitCode == 1
    assert cs.lastState.terminated.reason == "Error"
    assert not cs.ready
    assert pod.status is not None and pod.status.phase == "Running"
    assert condition(pod, "Ready") == "False"
    # running (never ready) -> exited with code 1 -> back-off -> running again ...
    assert history.states[:4] == [
        "running",
        "terminated:Error:1",
        "waiting:CrashLoopBackOff",
        "running",
    ]
    assert not any(history.ready)
    assert history.restart_counts == sorted(history.restart_counts)
    assert history.restart_counts[-1] >= 2
    event = wait_for_event(k8s_client, k8s_namespace, name, "BackOff")
    assert event.type == "Warning"


@pytest.mark.parametrize("selector", SELECTORS)
def test_oomkilled(k8s_client: Client, k8s_namespace: str, selector: str) -> None:
    name = make_pod(k8s_client, k8s_namespace, "oomkilled", selector)
    history = History()

    def restarted_twice(pod: Pod) -> bool:
        cs = container(pod)
        return cs is not None and cs.restartCount >= 2

    pod = wait_for(
        k8s_client,
        Pod,
        name,
        watching(history, restarted_twice),
        namespace=k8s_namespace,
        timeout=30,
    )
    cs = container(pod)
    assert cs is not None and cs.lastState is not None and cs.lastState.terminated is not None
    assert cs.lastState.terminated.reason == "OOMKilled"
    assert cs.lastState.terminated.exitCode == 137
    assert "terminated:OOMKilled:137" in history.states
    assert "waiting:CrashLoopBackOff" in history.states
    assert history.restart_counts == sorted(history.restart_counts)


@pytest.mark.parametrize("selector", SELECTORS)
def test_image_pull_failure(k8s_client: Client, k8s_namespace: str, selector: str) -> None:
    name = make_pod(k8s_client, k8s_namespace, "pullfail", selector)
    history = History()
    messages: dict[str, str] = {}

    def backed_off(pod: Pod) -> bool:
        cs = container(pod)
        if cs is not None and cs.state is not None and cs.state.waiting is not None:
            messages[cs.state.waiting.reason or ""] = cs.state.waiting.message or ""
        return "ImagePullBackOff" in messages

    pod = wait_for(
        k8s_client, Pod, name, watching(history, backed_off), namespace=k8s_namespace, timeout=20
    )
    assert history.states[:2] == ["waiting:ErrImagePull", "waiting:ImagePullBackOff"]
    assert "not found" in messages["ErrImagePull"]
    assert "not found" in messages["ImagePullBackOff"]
    assert pod.status is not None and pod.status.phase == "Pending"
    assert condition(pod, "Ready") == "False"
    cs = container(pod)
    assert cs is not None and not cs.ready and cs.restartCount == 0
    event = wait_for_event(k8s_client, k8s_namespace, name, "Failed")
    assert event.type == "Warning" and event.message and "not found" in event.message


@pytest.mark.parametrize("selector", SELECTORS)
def test_never_ready(k8s_client: Client, k8s_namespace: str, selector: str) -> None:
    name = make_pod(k8s_client, k8s_namespace, "neverready", selector)
    pod = in_phase(k8s_client, k8s_namespace, name, "Running", 10)
    cs = container(pod)
    assert cs is not None and cs.state is not None and cs.state.running is not None
    assert cs.started and not cs.ready
    assert condition(pod, "Ready") == "False"
    # ... and it stays that way: a watch over several seconds never sees it ready.
    with pytest.raises(WaitTimeout):
        wait_for(
            k8s_client,
            Pod,
            name,
            lambda p: condition(p, "Ready") == "True",
            namespace=k8s_namespace,
            timeout=4,
        )


def parse_time(value: object) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


@pytest.mark.parametrize("selector", SELECTORS)
def test_slow_start(k8s_client: Client, k8s_namespace: str, selector: str) -> None:
    name = make_pod(
        k8s_client, k8s_namespace, "slow", selector, annotations={READY_AFTER_ANNOTATION: "3"}
    )
    history = History()
    pod = wait_for(
        k8s_client,
        Pod,
        name,
        watching(history, lambda p: condition(p, "Ready") == "True"),
        namespace=k8s_namespace,
        timeout=20,
    )
    # It ran, not ready, before turning ready.
    assert history.ready[0] is False and history.ready[-1] is True
    cs = container(pod)
    assert cs is not None and cs.state is not None and cs.state.running is not None
    started = parse_time(cs.state.running.startedAt)
    ready_at = next(
        parse_time(c.lastTransitionTime)
        for c in (pod.status.conditions or [] if pod.status else [])
        if c.type == "Ready"
    )
    # API timestamps have one-second resolution.
    assert (ready_at - started).total_seconds() >= 2


def test_slow_start_defaults_to_five_seconds(k8s_client: Client, k8s_namespace: str) -> None:
    name = make_pod(k8s_client, k8s_namespace, "slow", "tag")
    in_phase(k8s_client, k8s_namespace, name, "Running", 10)
    with pytest.raises(WaitTimeout):
        wait_for(
            k8s_client,
            Pod,
            name,
            lambda p: condition(p, "Ready") == "True",
            namespace=k8s_namespace,
            timeout=3,
        )
    wait_for(
        k8s_client,
        Pod,
        name,
        lambda p: condition(p, "Ready") == "True",
        namespace=k8s_namespace,
        timeout=10,
    )


def test_annotation_wins_over_image_tag(k8s_client: Client, k8s_namespace: str) -> None:
    k8s_client.create(
        Pod(
            metadata=ObjectMeta(name="mixed", annotations={BEHAVIOUR_ANNOTATION: "neverready"}),
            spec=PodSpec(containers=[Container(name="app", image="app:crashloop")]),
        ),
        namespace=k8s_namespace,
    )
    pod = in_phase(k8s_client, k8s_namespace, "mixed", "Running", 10)
    with pytest.raises(WaitTimeout):
        wait_for(
            k8s_client,
            Pod,
            "mixed",
            lambda p: (c := container(p)) is not None and c.restartCount > 0,
            namespace=k8s_namespace,
            timeout=4,
        )
    assert condition(pod, "Ready") == "False"


def test_crash_with_restart_policy_never_fails_the_pod(
    k8s_client: Client, k8s_namespace: str
) -> None:
    name = make_pod(k8s_client, k8s_namespace, "crashloop", "tag", restart_policy="Never")
    pod = in_phase(k8s_client, k8s_namespace, name, "Failed", 15)
    cs = container(pod)
    assert cs is not None and cs.state is not None and cs.state.terminated is not None
    assert cs.state.terminated.exitCode == 1 and cs.restartCount == 0


def test_pod_bigger_than_any_node_is_unschedulable(k8s_client: Client, k8s_namespace: str) -> None:
    name = make_pod(k8s_client, k8s_namespace, "default", "tag", cpu="64")

    def unschedulable(pod: Pod) -> bool:
        for c in (pod.status.conditions or []) if pod.status else []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return True
        return False

    pod = wait_for(k8s_client, Pod, name, unschedulable, namespace=k8s_namespace, timeout=30)
    assert pod.status is not None and pod.status.phase == "Pending"
    assert pod.spec is not None and not pod.spec.nodeName
    message = next(c.message for c in pod.status.conditions or [] if c.type == "PodScheduled")
    assert message and "Insufficient cpu" in message
