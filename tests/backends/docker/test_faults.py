"""Faults between shipway and a real Docker engine (the fault proxy of tests/testenv/faults.py
on a unix socket in front of host A's): transient ones are retried, a create whose answer
was lost is not made twice, and no fault turns into a false or wrong outcome. The test's
own checks reach the engine directly, never through the proxy."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipway import api
from shipway.backends.docker import admin, caddy
from shipway.backends.docker.records import tar_of
from shipway.engine import Rolled, RolledBack
from shipway.errors import ShipwayError
from tests.backends.docker.conftest import SLOT, Deployment, Lines
from tests.testenv.docker import DockerHost
from tests.testenv.faults import DOCUMENTED_EXIT_CODES, FaultProxy, docker_proxy

CREATE = "/containers/create$"


@dataclass
class Faulty:
    """A test app whose only host is host A, reached through a fault proxy."""

    deployment: Deployment
    proxy: FaultProxy
    host: DockerHost

    def write(self, image: str | None = None) -> None:
        self.deployment.write(image=image, hosts=[self.host])

    def deploy(self, image: str | None = None) -> tuple[object, Lines]:
        lines = Lines()
        return self.deployment.deploy(lines, image=image), lines

    def serving(self) -> tuple[int, str]:
        return self.deployment.get(self.host)

    def statuses(self) -> dict[int, str]:
        app = self.deployment.app()
        records = api.history(app, SLOT)
        return {r.revision: str(r.status) for r in records}

    def app_containers(self) -> list[object]:
        return self.deployment.containers(self.host, kind="app")

    def name_of(self, process: str = "web") -> str:
        return f"{self.deployment.name}-{SLOT}-{process}"


@pytest.fixture
def faulty(deployment: Deployment, tmp_path: Path) -> Iterator[Faulty]:
    env = deployment.env
    proxy, url = docker_proxy(env.a.socket, tmp_path / "proxy", "faulty-a")
    host = DockerHost(name="faulty-a", url=url, address=env.a.address, socket=env.a.socket)
    try:
        yield Faulty(deployment, proxy, host)
    finally:
        proxy.stop()


def deployed_first(f: Faulty) -> None:
    f.write()
    outcome, lines = f.deploy()
    assert isinstance(outcome, Rolled), lines.text()
    assert f.serving() == (200, "v1\n")
    f.proxy.reset_log()


def retry_lines(lines: Lines) -> list[str]:
    return [line for line in lines.lines if line.startswith("retrying ")]


# -- transient faults are retried ----------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        ({"method": "GET", "path": "/containers/{app}-test-web[^/]*/json$", "status": 500},
         "after 500 Internal Server Error"),
        # the deploy's own lists (the freeze's, read before the deploy begins, is not one)
        ({"method": "GET", "path": "/containers/json$", "query": "^(?!.*freeze)",
          "status": 503}, "after 503 Service Unavailable"),
        ({"method": "POST", "path": CREATE, "query": "name={app}-test-web", "reset": "before"},
         "create container/web"),
        ({"method": "PUT", "path": "/archive$", "status": 500}, "after 500"),
        ({"method": "POST", "path": "/exec/[^/]+/start$", "reset": "after"}, "after a connection"),
    ],
    ids=["500-inspect", "503-list", "reset-before-create", "500-archive", "reset-after-exec"],
)  # fmt: skip
def test_a_single_transient_fault_is_retried_and_the_deploy_rolls(
    faulty: Faulty, rule: dict[str, object], said: str
) -> None:
    """(The exec fault lands on the drain's look at the old container's connections: the
    switch goes through the proxy's admin socket, with no exec.)"""
    deployed_first(faulty)
    app = faulty.deployment.name
    rule = {k: v.format(app=app) if isinstance(v, str) else v for k, v in rule.items()}
    faulty.proxy.rule(**rule)
    outcome, lines = faulty.deploy(faulty.deployment.env.images.v2)
    assert isinstance(outcome, Rolled), lines.text()
    assert len(faulty.proxy.faults()) == 1, faulty.proxy.log()
    retried = retry_lines(lines)
    assert len(retried) == 1 and said.format(app=app) in retried[0], lines.text()
    assert faulty.serving() == (200, "v2\n")
    assert faulty.statuses() == {1: "superseded", 2: "deployed"}


def test_a_reload_exec_cut_off_is_run_again_whole(
    faulty: Faulty, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the admin socket cannot be reached, the switch is an exec of caddy reload;
    one whose answer was cut off is run again (loading the same files twice is safe)."""
    deployed_first(faulty)
    # a switch that reloads: the proxy's last load not recorded (as after a run killed
    # between its write and its load), so the switch loads the config again
    (proxy,) = faulty.deployment.containers(faulty.deployment.env.a, kind="proxy")
    proxy.put_archive(caddy.CONFIG_DIR, tar_of({caddy.LOADED_FILE: (b"killed\n", 0o644)}))
    monkeypatch.setattr(admin, "host_socket", lambda proxy, config_dir: None)  # unreachable
    faulty.proxy.rule(method="POST", path="/exec/[^/]+/start$", reset="after")
    outcome, lines = faulty.deploy(faulty.deployment.env.images.v2)
    assert isinstance(outcome, Rolled), lines.text()
    assert len(faulty.proxy.faults()) == 1, faulty.proxy.log()
    retried = retry_lines(lines)
    assert len(retried) == 1 and "update route/web" in retried[0], lines.text()
    assert faulty.serving() == (200, "v2\n")


def test_a_container_create_whose_answer_was_lost_is_not_made_twice(faulty: Faulty) -> None:
    """The engine created the container; its answer was lost. Sending the create again
    would be refused (the name is taken) and fail the deploy: the container is inspected,
    found carrying the labels sent, and used."""
    deployed_first(faulty)
    name = faulty.name_of()
    faulty.proxy.rule(method="POST", path=CREATE, query=f"name={name}", reset="after")
    outcome, lines = faulty.deploy(faulty.deployment.env.images.v2)
    assert isinstance(outcome, Rolled), lines.text()
    creates = [c for c in faulty.proxy.calls if c.path.endswith(CREATE[:-1]) and name in c.query]
    assert len(creates) == 1 and creates[0].upstream_status == 201, faulty.proxy.log()
    assert any(re.search(f"/containers/{name}[^/]*/json$", c.path) for c in faulty.proxy.calls)
    assert [c.labels["org.shipway.release"] for c in faulty.app_containers()] == ["2"]  # type: ignore[attr-defined]


def test_the_lock_taken_with_a_lost_answer_is_ours(faulty: Faulty) -> None:
    faulty.write()
    lock = f"shipway-{faulty.deployment.name}-{SLOT}-lock"
    faulty.proxy.rule(method="POST", path=CREATE, query=f"name={lock}", reset="after")
    outcome, lines = faulty.deploy()
    assert isinstance(outcome, Rolled), lines.text()
    assert "is locked by" not in lines.text()
    assert faulty.deployment.containers(faulty.host, kind="lock") == []  # released


# -- outcomes stay honest ---------------------------------------------------------------


def record_of(f: Faulty, revision: int) -> dict[str, object]:
    return {
        "method": "POST",
        "path": CREATE,
        "query": f"name=shipway-{f.deployment.name}-{SLOT}-r{revision}-",
        "status": 503,
        "skip": 1,  # the pending record lands; every later write of it fails
        "times": None,
    }


def test_a_good_rollout_whose_record_cannot_be_written_serves_and_is_repaired_next(
    faulty: Faulty,
) -> None:
    deployed_first(faulty)
    faulty.proxy.rule(**record_of(faulty, 2))
    outcome, lines = faulty.deploy(faulty.deployment.env.images.v2)
    assert isinstance(outcome, Rolled) and outcome.records_behind, lines.text()
    assert any("r2 is serving, but its record could not be written" in w for w in outcome.warnings)
    assert faulty.serving() == (200, "v2\n")
    assert faulty.statuses() == {1: "deployed", 2: "pending"}

    faulty.proxy.clear()
    outcome, lines = faulty.deploy(faulty.deployment.env.images.v1)
    assert isinstance(outcome, Rolled) and outcome.from_revision == 2, lines.text()
    assert "r2 is what runs, whole and ready: recorded as deployed" in lines.text()
    assert "re-asserting r1" not in lines.text()  # the good release was never undone
    assert faulty.statuses() == {1: "superseded", 2: "superseded", 3: "deployed"}
    assert faulty.serving() == (200, "v1\n")


def test_a_bad_rollout_whose_records_cannot_be_written_is_still_rolled_back(
    faulty: Faulty,
) -> None:
    deployed_first(faulty)
    faulty.proxy.rule(**record_of(faulty, 2))
    outcome, lines = faulty.deploy(faulty.deployment.env.images.crash)
    assert isinstance(outcome, RolledBack) and outcome.records_behind, lines.text()
    assert any("r2 is pending (r1 is serving)" in w for w in outcome.warnings), outcome.warnings
    assert faulty.serving() == (200, "v1\n")
    assert faulty.statuses() == {1: "deployed", 2: "pending"}

    faulty.proxy.clear()
    outcome, lines = faulty.deploy(faulty.deployment.env.images.v2)
    assert isinstance(outcome, Rolled), lines.text()
    assert "recovering: r2 was left pending" in lines.text()
    assert faulty.statuses() == {1: "superseded", 2: "failed", 3: "deployed"}


# -- a randomised run ---------------------------------------------------------------------


def outcome_of(f: Faulty, image: str, force: bool = False) -> tuple[int, object, str]:
    lines = Lines()
    try:
        outcome = f.deployment.deploy(lines, image=image, force=force)
    except ShipwayError as exc:
        return exc.exit_code, exc, lines.text()
    return outcome.exit_code, outcome, lines.text()


@pytest.mark.parametrize("seed", range(6))
def test_random_faults_on_all_calls_never_give_a_false_or_wrong_outcome(
    faulty: Faulty, seed: int
) -> None:
    """10% of all Engine API calls broken (seeded: 503, 500, 429 with Retry-After, resets
    before and after the engine acted); a crashing image in every third trial; then a
    fault-free run."""
    deployed_first(faulty)
    images = faulty.deployment.env.images
    good = seed % 3 != 2
    faulty.proxy.randomly(0.10, seed)
    code, outcome, said = outcome_of(faulty, images.v2 if good else images.crash)
    faults = faulty.proxy.faults()
    faulty.proxy.clear()
    story = f"seed {seed}: exit {code}\n{said}\nfaults:\n" + "\n".join(map(str, faults))

    assert code in DOCUMENTED_EXIT_CODES, story
    serving = faulty.serving()
    statuses = faulty.statuses()
    if code == 0:  # never a false success
        assert good and serving == (200, "v2\n"), story
        assert statuses[2] == "deployed" or getattr(outcome, "records_behind", False), story
    if code == 10:
        assert serving == (200, "v1\n"), story
    if code == 11:  # only when the previous release verifiably does not serve
        assert serving != (200, "v1\n"), story
    if good and len(faults) == 1:
        assert code == 0, story

    # (forced: after a rollback to v1, deploying v1 again would be "no changes")
    code, outcome, said = outcome_of(faulty, images.v1, force=True)
    assert code == 0, f"{story}\nnext run:\n{said}"
    statuses = faulty.statuses()
    newest = max(statuses)
    assert [n for n, s in statuses.items() if s in ("deployed", "pending")] == [newest], statuses
    assert faulty.serving() == (200, "v1\n")
