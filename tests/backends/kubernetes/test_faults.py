"""Faults between shipway and the real API server (the fault proxy of tests/testenv/faults.py):
transient ones are retried, watches survive, and no fault turns into a false or wrong
outcome. The test's own checks read the cluster directly, never through the proxy."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lightkube import Client

from shipway import api
from shipway.engine.outcome import RollbackFailed, Rolled, RolledBack
from shipway.errors import ShipwayError
from tests.backends.kubernetes.conftest import Lines, Slot
from tests.testenv.faults import DOCUMENTED_EXIT_CODES, FaultProxy, kubernetes_proxy

pytestmark = pytest.mark.k8s

WEB = "/apis/apps/v1/namespaces/[^/]+/deployments/shop-web$"
PODS_WATCH = ("/api/v1/namespaces/[^/]+/pods$", "watch=true")
DEPLOYMENTS_WATCH = ("/apis/apps/v1/namespaces/[^/]+/deployments$", "watch=true")
RECORD_V2 = "/api/v1/namespaces/[^/]+/secrets/shipway.release.v1.shop.v2$"
CRASHLOOP = "registry.example/shop:crashloop"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/[^/]+/leases/shipway-lock\\.shop\\.test1$"


@dataclass
class Faulty:
    """A test slot whose shipway reaches the cluster through a fault proxy."""

    slot: Slot
    proxy: FaultProxy

    def calls(self, method: str, path: str) -> list[str]:
        import re

        return [str(c) for c in self.proxy.calls if c.method == method and re.search(path, c.path)]


@pytest.fixture
def faulty(
    kube_env: Path,
    k8s_client: Client,
    k8s_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Faulty]:
    proxy, kubeconfig = kubernetes_proxy(kube_env, tmp_path / "proxy")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    slot = Slot(tmp_path, k8s_namespace, kubeconfig, k8s_client)
    try:
        yield Faulty(slot, proxy)
    finally:
        slot.close()
        proxy.stop()


def deployed_first(f: Faulty) -> None:
    app = f.slot.write()
    outcome, lines = f.slot.deploy(app)
    assert isinstance(outcome, Rolled), lines.text
    f.proxy.reset_log()


# -- transient faults are retried ----------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        ({"method": "PATCH", "path": WEB, "status": 503}, "after 503 ServiceUnavailable"),
        ({"method": "PATCH", "path": WEB, "status": 409}, "after 409 Conflict"),
        ({"method": "PATCH", "path": WEB, "status": 500}, "after 500 InternalError"),
        ({"method": "PATCH", "path": WEB, "reset": "after"}, "after a connection error"),
        (
            {"method": "GET", "path": "/secrets$", "query": "owner", "status": 500},
            "reading the release records of shop/test1 after 500",
        ),
        (
            {"method": "GET", "path": "/namespaces/[^/]+$", "reset": "before"},
            "reading namespace",
        ),
    ],
    ids=["503-apply", "409-apply", "500-apply", "reset-after-apply", "500-list", "reset-get"],
)
def test_a_single_transient_fault_is_retried_and_the_deploy_rolls(
    faulty: Faulty, rule: dict[str, object], said: str
) -> None:
    deployed_first(faulty)
    faulty.proxy.rule(**rule)
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image="registry.example/shop:2")
    assert isinstance(outcome, Rolled), lines.text
    assert [c.fault for c in faulty.proxy.faults()] != []  # the fault was injected ...
    retried = [line for line in lines.lines if line.startswith("retrying ")]
    assert len(retried) == 1 and said in retried[0], lines.text  # ... said, and retried
    assert faulty.slot.images()["shop-web"] == "registry.example/shop:2"
    assert faulty.slot.statuses(faulty.slot.app()) == {1: "superseded", 2: "deployed"}


def test_a_429_waits_as_long_as_its_retry_after_says(faulty: Faulty) -> None:
    deployed_first(faulty)
    faulty.proxy.rule(method="PATCH", path=WEB, status=429, retry_after=1)
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image="registry.example/shop:2")
    assert isinstance(outcome, Rolled), lines.text
    assert any(
        "retrying applying Deployment/shop-web after 429 TooManyRequests" in line
        and "in 1.0s" in line
        for line in lines.lines
    ), lines.text
    patches = [c for c in faulty.proxy.calls if c.method == "PATCH" and c.path.endswith("shop-web")]
    assert len(patches) == 2 and patches[0].fault and not patches[1].fault
    assert patches[1].at - patches[0].at >= 1.0  # the server's Retry-After, honoured


def test_a_create_whose_answer_was_lost_is_read_back_not_sent_twice(faulty: Faulty) -> None:
    """The Lease is created (it is new in this namespace); its answer is lost. A second
    create would be refused (409) and the deploy would call its own Lease someone else's."""
    faulty.slot.write()
    faulty.proxy.rule(method="POST", path="/leases$", reset="after")
    outcome, lines = faulty.slot.deploy(faulty.slot.app())
    assert isinstance(outcome, Rolled), lines.text
    creates = [c for c in faulty.proxy.calls if c.method == "POST" and c.path.endswith("/leases")]
    assert len(creates) == 1 and creates[0].upstream_status == 201  # it landed, once
    assert "is locked by" not in lines.text


def test_a_fault_that_outlasts_the_retries_names_the_call_and_the_attempts(
    faulty: Faulty,
) -> None:
    deployed_first(faulty)
    faulty.proxy.rule(method="PATCH", path=WEB, status=503, times=None)
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image="registry.example/shop:2")
    # the new release never got its Deployment: what it changed is put back; r1 serves
    assert isinstance(outcome, RolledBack), lines.text
    assert "applying Deployment/shop-web: 503 ServiceUnavailable" in lines.text
    assert "(after 6 attempts in" in lines.text
    assert faulty.slot.images()["shop-web"] == "registry.example/shop:1"


# -- watches survive --------------------------------------------------------------------


def test_a_reset_when_the_watch_opens_is_reopened_and_the_deploy_rolls(faulty: Faulty) -> None:
    deployed_first(faulty)
    path, query = PODS_WATCH
    faulty.proxy.rule(method="GET", path=path, query=query, reset="before")
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image="registry.example/shop:2")
    assert isinstance(outcome, Rolled), lines.text
    # resumed from the version its list gave: nothing missed, nothing listed again
    assert "watch of Pod in" in lines.text and "watching again from version" in lines.text
    watches = [c for c in faulty.proxy.calls if c.path.endswith("/pods") and "watch" in c.query]
    assert len(watches) >= 2


def test_a_reset_watch_never_turns_a_rollback_into_rollback_failed(faulty: Faulty) -> None:
    """The issue's 5 of 5: a crash-looping release, a reset when the watch opens. The
    deploy's wait and the rollback's both see a live watch: rolled back, exit 10."""
    deployed_first(faulty)
    path, query = PODS_WATCH
    faulty.proxy.rule(method="GET", path=path, query=query, reset="before")
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image=CRASHLOOP)
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.exit_code == 10 and outcome.failure.reason == "CrashLoopBackOff"
    assert faulty.slot.images()["shop-web"] == "registry.example/shop:1"
    web = faulty.slot.deployment("shop-web")
    assert web.status.availableReplicas == 2


def test_a_watch_cut_mid_stream_and_one_answering_410_are_listed_again(faulty: Faulty) -> None:
    deployed_first(faulty)
    path, query = PODS_WATCH
    faulty.proxy.rule(method="GET", path=path, query=query, cut_after=0.3)
    path, query = DEPLOYMENTS_WATCH
    faulty.proxy.rule(method="GET", path=path, query=query, gone=True)
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image="registry.example/shop:2")
    assert isinstance(outcome, Rolled), lines.text
    assert "410 Gone" in lines.text
    lists = [
        c for c in faulty.proxy.calls if c.path.endswith("/deployments") and "watch" not in c.query
    ]
    assert len(lists) >= 2  # re-listed after the 410, not watched from an expired version


def test_the_rollback_never_shares_the_deploys_dead_watch(faulty: Faulty) -> None:
    """A watch that ends for good (403) fails the wait it serves; the rollback's wait opens
    watches of its own and verifies that r1 serves again."""
    deployed_first(faulty)
    path, query = PODS_WATCH
    faulty.proxy.rule(method="GET", path=path, query=query, status=403, times=2)
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image="registry.example/shop:2")
    assert isinstance(outcome, RolledBack), lines.text
    assert "watching Pod in" in outcome.failure.message and "403" in outcome.failure.message
    assert faulty.slot.images()["shop-web"] == "registry.example/shop:1"
    # the rollback's wait listed (and watched) afresh rather than reuse the dead watch
    watches = [c for c in faulty.proxy.calls if c.path.endswith("/pods") and "watch" in c.query]
    assert len(watches) >= 2


# -- a slow API server -------------------------------------------------------------------


def test_a_slow_api_server_does_not_lose_a_live_deploy_its_lock(faulty: Faulty) -> None:
    """Every write of the Lease answered 5 s late. Renewals go 2 s after the last answer,
    7 s apart, so the 10 s renew deadline passes while one is on its way, every time. The
    operation waits for its answer instead of giving up its lock: the crash loop is what
    the deploy is rolled back for, not a lost lock."""
    deployed_first(faulty)
    faulty.proxy.rule(method="PUT", path=LEASE, delay=5.0, times=None)
    started = time.monotonic()
    outcome, lines = faulty.slot.deploy(
        faulty.slot.app(), image=CRASHLOOP, tuning={"crashes_per_replica": 3}
    )
    took = time.monotonic() - started
    assert "lost the lock" not in lines.text, lines.text
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.exit_code == 10 and outcome.failure.reason == "CrashLoopBackOff"
    assert faulty.slot.images()["shop-web"] == "registry.example/shop:1"
    # it outlived the renew deadline (10 s after its first write), a renewal on its way then
    writes = [c for c in faulty.proxy.calls if c.method == "PUT" and "/leases/" in c.path]
    assert took > 12 and len(writes) >= 3, (took, [str(c) for c in writes])


# -- outcomes stay honest ---------------------------------------------------------------


def test_a_bad_rollout_whose_records_cannot_be_written_is_still_rolled_back(
    faulty: Faulty,
) -> None:
    deployed_first(faulty)
    # r2's pending record lands; every later write of it fails
    faulty.proxy.rule(method="PATCH", path=RECORD_V2, status=503, skip=1, times=None)
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image=CRASHLOOP)
    assert isinstance(outcome, RolledBack), lines.text
    assert outcome.records_behind
    assert any(
        "the release records are behind" in w and "r2 is pending (r1 is serving)" in w
        for w in outcome.warnings
    ), outcome.warnings
    assert faulty.slot.images()["shop-web"] == "registry.example/shop:1"
    assert faulty.slot.statuses(faulty.slot.app()) == {1: "deployed", 2: "pending"}

    faulty.proxy.clear()
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image="registry.example/shop:3")
    assert isinstance(outcome, Rolled), lines.text
    assert "recovering: r2 was left pending" in lines.text
    assert faulty.slot.statuses(faulty.slot.app()) == {1: "superseded", 2: "failed", 3: "deployed"}


def test_a_good_rollout_whose_record_cannot_be_written_serves_and_is_repaired_next(
    faulty: Faulty,
) -> None:
    deployed_first(faulty)
    faulty.proxy.rule(method="PATCH", path=RECORD_V2, status=503, skip=1, times=None)
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image="registry.example/shop:2")
    assert isinstance(outcome, Rolled) and outcome.exit_code == 0, lines.text
    assert outcome.records_behind
    assert any("r2 is serving, but its record could not be written" in w for w in outcome.warnings)
    assert faulty.slot.images()["shop-web"] == "registry.example/shop:2"
    assert faulty.slot.statuses(faulty.slot.app()) == {1: "deployed", 2: "pending"}

    faulty.proxy.clear()
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image="registry.example/shop:3")
    assert isinstance(outcome, Rolled), lines.text
    assert "r2 is what runs, whole and ready: recorded as deployed" in lines.text
    assert "re-asserting r1" not in lines.text  # the good release was never undone
    assert outcome.from_revision == 2
    assert faulty.slot.statuses(faulty.slot.app()) == {
        1: "superseded",
        2: "superseded",
        3: "deployed",
    }


def test_an_undo_stopped_by_a_fault_is_read_again_and_tried_again(faulty: Faulty) -> None:
    """During the undo, one 503 on the namespace read and one on a list (retried by the
    client), then the undo's own apply failing through every retry: the engine reads the
    slot again and walks the undo once more. r1 serves: rolled back, exit 10."""
    deployed_first(faulty)
    faulty.proxy.rule(method="GET", path="/namespaces/[^/]+$", status=503, skip=1)
    faulty.proxy.rule(method="GET", path="/deployments$", query="labelSelector", status=503, skip=1)
    faulty.proxy.rule(method="PATCH", path=WEB, status=503, skip=1, times=6)
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image=CRASHLOOP)
    assert isinstance(outcome, RolledBack), lines.text
    assert "reading the slot again and trying once more (attempt 2 of 3)" in lines.text
    assert faulty.slot.images()["shop-web"] == "registry.example/shop:1"
    assert faulty.slot.deployment("shop-web").status.availableReplicas == 2


def test_rollback_failed_is_said_when_the_previous_release_is_verifiably_not_serving(
    faulty: Faulty,
) -> None:
    deployed_first(faulty)
    faulty.proxy.rule(method="PATCH", path=WEB, status=503, skip=1, times=None)
    outcome, lines = faulty.slot.deploy(faulty.slot.app(), image=CRASHLOOP)
    assert isinstance(outcome, RollbackFailed) and outcome.exit_code == 11, lines.text
    # and it is true: what runs is the crash-looping r2, not r1
    assert faulty.slot.images()["shop-web"] == CRASHLOOP


# -- a randomised run ---------------------------------------------------------------------


def outcome_of(f: Faulty, image: str) -> tuple[int, object, str]:
    """(exit code, outcome or error, what was said) of one deploy of ``image``."""
    lines = Lines()
    try:
        outcome = api.deploy(
            f.slot.app(), "test1", image=image, backend=f.slot.backend(f.slot.app()), reporter=lines
        )
    except ShipwayError as exc:
        return exc.exit_code, exc, lines.text
    return outcome.exit_code, outcome, lines.text


@pytest.mark.parametrize("seed", range(10))
def test_random_faults_on_all_calls_never_give_a_false_or_wrong_outcome(
    faulty: Faulty, seed: int
) -> None:
    """10% of all calls broken (seeded: 503, 500, 502, 504, 429 with Retry-After, resets
    before and after the engine acted, 409 on patches, cut watches, 410 events); one deploy
    per trial, a crash-looping one in every third; then a fault-free run."""
    deployed_first(faulty)
    r1 = faulty.slot.images()
    good = seed % 3 != 2
    image = "registry.example/shop:2" if good else CRASHLOOP
    faulty.proxy.randomly(0.10, seed)
    code, outcome, said = outcome_of(faulty, image)
    faults = faulty.proxy.faults()
    faulty.proxy.clear()
    story = f"seed {seed}: exit {code}\n{said}\nfaults:\n" + "\n".join(map(str, faults))

    assert code in DOCUMENTED_EXIT_CODES, story
    live = faulty.slot.images()
    statuses = faulty.slot.statuses(faulty.slot.app())
    web = faulty.slot.deployment("shop-web").status
    if code == 0:  # never a false success: the new release is what runs, and ready
        assert good and live["shop-web"] == image and web.availableReplicas == 2, story
        assert statuses[2] == "deployed" or getattr(outcome, "records_behind", False), story
    if code == 10:  # rolled back: the previous release is what runs again, and ready
        assert live == r1 and web.availableReplicas == 2, story
    if code == 11:  # rollback-failed only when the previous release verifiably is not serving
        assert live != r1 or (web.availableReplicas or 0) < 2, story
    if good and len(faults) == 1:
        assert code == 0, story

    # the next run, fault-free, resolves whatever was left and rolls
    code, outcome, said = outcome_of(faulty, "registry.example/shop:3")
    assert code == 0, f"{story}\nnext run:\n{said}"
    statuses = faulty.slot.statuses(faulty.slot.app())
    newest = max(statuses)
    assert statuses[newest] == "deployed", statuses
    assert [n for n, s in statuses.items() if s in ("deployed", "pending")] == [newest], statuses
    assert faulty.slot.images()["shop-web"] == "registry.example/shop:3"
