"""Rollouts on two real Docker hosts (A: local socket, B: over SSH): first deploy, a
zero-downtime redeploy under load, a failing health gate, a crash, a targeted restart."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections import Counter

from shipway import api
from shipway.backends.protocol import Reason
from shipway.engine import NoAnchor, Rolled, RolledBack
from shipway.release.model import ReleaseStatus
from tests.backends.docker.conftest import SLOT, Deployment, Lines
from tests.testenv.docker import DockerHost, wait_http


def test_first_deploy_serves_on_both_hosts_and_records_on_the_first(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write(
        extra="""
[env]
GREETING = "hello"
""",
    )
    lines = Lines()
    outcome = deployment.deploy(lines)
    assert isinstance(outcome, Rolled), outcome.line()
    for host in (env.a, env.b):
        assert deployment.get(host) == (200, "v1\n")
        assert "GREETING=hello" in deployment.get(host, "/cgi-bin/env")[1]
        # one app container and one proxy per host, labelled with the release
        (web,) = deployment.containers(host, kind="app")
        assert web.labels["org.shipway.process"] == "web"
        assert web.labels["org.shipway.release"] == "1"
        assert web.status == "running"
        assert len(deployment.containers(host, kind="proxy")) == 1
    # the records live on the first host only
    assert len(deployment.containers(env.a, kind="record")) == 1
    assert deployment.containers(env.b, kind="record") == []
    (record,) = api.history(deployment.app(), SLOT)
    assert record.status == ReleaseStatus.DEPLOYED
    assert record.digest and record.digest.startswith("sha256:")
    assert record.image_meta is not None and record.image_meta.source_type == "dockerfile"
    status = {p.process: p for p in api.status(deployment.app(), SLOT).processes}
    assert (status["web"].desired, status["web"].ready) == (2, 2)
    assert status["web"].detail["hosts"] == {"docker-a": "1/1", env.b.address: "1/1"}
    # the lock was released
    assert deployment.containers(env.a, kind="lock") == []


class Load:
    """A bounded loopback request loop against the test hosts' proxies (GET /version)."""

    def __init__(self, urls: list[str], threads_per_url: int = 2, pause: float = 0.005) -> None:
        self.pause = pause
        self.urls = urls
        self.ok: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._loop, args=(u,), daemon=True)
            for u in urls
            for _ in range(threads_per_url)
        ]
        self.deadline = time.monotonic() + 600  # never runs on by itself

    def _loop(self, url: str) -> None:
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    self.ok[resp.read().decode().strip()] += 1
            except (urllib.error.URLError, OSError) as exc:
                self.failures[f"{url}: {type(exc).__name__}: {exc}"[:160]] += 1
            time.sleep(self.pause)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)


def test_redeploy_under_load_fails_no_request(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write()
    assert isinstance(deployment.deploy(), Rolled)
    urls = [deployment.url(env.a), deployment.url(env.b)]
    with Load(urls) as load:
        for image in (env.images.v2, env.images.v1, env.images.v2):  # v1 -> v2 -> v1 -> v2
            outcome = deployment.deploy(image=image)
            assert isinstance(outcome, Rolled), outcome.line()
        deadline = time.monotonic() + 10
        while load.ok["v2"] < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
    failed = list(load.failures.elements())
    assert failed == [], load.failures.most_common(5)  # switches, no reload: none lost
    assert load.ok["v1"] > 100 and load.ok["v2"] > 50
    for host in (env.a, env.b):
        assert deployment.get(host) == (200, "v2\n")
        assert len(deployment.containers(host, kind="app")) == 1  # the old ones are gone


def _ids(deployment: Deployment, host: DockerHost) -> dict[str, str]:
    return {
        c.labels["org.shipway.key"]: c.id
        for c in deployment.containers(host, kind="app")
        if c.status == "running"
    }


def test_failing_health_gate_rolls_back_and_old_containers_keep_serving(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write()
    assert isinstance(deployment.deploy(), Rolled)
    before = {h.name: _ids(deployment, h) for h in (env.a, env.b)}
    proxies = {h.name: deployment.containers(h, kind="proxy")[0].id for h in (env.a, env.b)}
    lines = Lines()
    outcome = deployment.deploy(lines, image=env.images.unhealthy)
    assert isinstance(outcome, RolledBack), outcome.line()
    assert outcome.exit_code == 10
    assert outcome.failure.reason == "HealthcheckFailed"
    assert "answered 500" in outcome.failure.message
    assert any("what happened on each host" in d for d in outcome.failure.details)
    for host in (env.a, env.b):
        assert deployment.get(host) == (200, "v1\n")
        # the very same containers serve; the unhealthy ones are gone
        assert _ids(deployment, host) == before[host.name]
        assert deployment.containers(host, kind="proxy")[0].id == proxies[host.name]
    statuses = [r.status for r in api.history(deployment.app(), SLOT)]
    assert statuses == [ReleaseStatus.DEPLOYED, ReleaseStatus.FAILED]


def test_a_crashing_image_fails_fast_with_its_exit_code_and_logs(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(hosts=[env.a])
    assert isinstance(deployment.deploy(), Rolled)
    started = time.monotonic()
    outcome = deployment.deploy(image=env.images.crash)
    assert isinstance(outcome, RolledBack), outcome.line()
    assert time.monotonic() - started < 30  # not the 120 s deploy timeout
    assert outcome.failure.reason == Reason.CRASHED
    assert outcome.failure.exit_code == 3
    assert any("CRASH_ON_START is set" in d for d in outcome.failure.details)
    assert deployment.get(env.a) == (200, "v1\n")


def test_failed_first_deploy_leaves_nothing_running(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(image=env.images.unhealthy)
    outcome = deployment.deploy()
    assert isinstance(outcome, NoAnchor), outcome.line()
    assert outcome.exit_code == 12
    for host in (env.a, env.b):
        assert [c for c in deployment.containers(host, kind="app")] == []
    (record,) = api.history(deployment.app(), SLOT)
    assert record.status == ReleaseStatus.FAILED


def test_restart_of_one_process_leaves_the_others_untouched(deployment: Deployment) -> None:
    env = deployment.env
    deployment.write(
        processes="""
[processes.web]
port = 8080
[processes.web.healthcheck]
path = "/up"
interval = "100ms"

[processes.worker]
command = ["/app/worker"]
""",
        hosts=[env.a],
    )
    assert isinstance(deployment.deploy(), Rolled)
    workers = {c.id for c in deployment.containers(env.a, process="worker")}
    webs = {c.id for c in deployment.containers(env.a, process="web")}
    outcome = api.restart(deployment.app(), SLOT, "web", reporter=Lines(), timeout=120)
    assert isinstance(outcome, Rolled), outcome.line()
    assert {c.id for c in deployment.containers(env.a, process="worker")} == workers
    new_webs = {c.id for c in deployment.containers(env.a, process="web")}
    assert new_webs and new_webs.isdisjoint(webs)
    wait_http(deployment.url(env.a, "/up"))


def test_image_types_start_their_own_way(deployment: Deployment) -> None:
    """herokuish runs `/start web` (its Procfile); a buildpacks image runs through the CNB
    launcher (`/cnb/process/web`): both serve, and the record says what they are."""
    env = deployment.env
    for image, kind, version in (
        (env.images.herokuish, "herokuish", "herokuish-v1"),
        (env.images.cnb, "pack", "cnb-v1"),
    ):
        deployment.write(image=image, hosts=[env.a])
        outcome = deployment.deploy()
        assert isinstance(outcome, Rolled), outcome.line()
        assert deployment.get(env.a) == (200, f"{version}\n")
        top = api.history(deployment.app(), SLOT)[-1]
        assert top.image_meta is not None and top.image_meta.source_type == kind
        (web,) = [c for c in deployment.containers(env.a, kind="app") if c.status == "running"]
        entry = web.attrs["Config"]["Entrypoint"]
        assert entry == (["/start"] if kind == "herokuish" else ["/cnb/process/web"])


def test_release_command_runs_once_before_the_switch_and_its_failure_rolls_back(
    deployment: Deployment,
) -> None:
    env = deployment.env
    deployment.write(
        extra='[env]\nMARKER = "m-1"\n',
    )
    text = deployment.spec_file.read_text().replace(
        "[app]\n", '[app]\nrelease_command = ["sh", "-c", "echo migrated with $MARKER"]\n', 1
    )
    deployment.spec_file.write_text(text)
    lines = Lines()
    assert isinstance(deployment.deploy(lines), Rolled)
    out = lines.text()
    assert out.count("release command: migrated with m-1") == 1  # once, not per host
    assert out.index("run the release command") < out.index("create route/web@docker-a")
    assert deployment.containers(env.a, kind="release-command") == []  # cleaned up

    deployment.spec_file.write_text(
        text.replace('"echo migrated with $MARKER"', '"echo boom; exit 3"').replace("m-1", "m-2")
    )
    outcome = deployment.deploy(Lines())
    assert isinstance(outcome, RolledBack), outcome.line()
    assert outcome.failure.reason == "ReleaseCommandFailed"
    assert outcome.failure.exit_code == 3 and "boom" in outcome.failure.details
    for host in (env.a, env.b):
        assert "MARKER=m-1" in deployment.get(host, "/cgi-bin/env")[1]
