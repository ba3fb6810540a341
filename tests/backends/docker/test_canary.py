"""Canary releases on two real Docker hosts: each host's shared Caddy splits the slot's route
by weight (sticky by cookie, a tester's header), its access log counts the answers per
release, and shipway decides over the sum of both hosts' counts. A broken canary is aborted
within a few failed requests and the stable serves alone again; a good one walks its steps
to 100 % under a request loop; a canary left by a ``kill -9`` ends with one release."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shipway.backends.docker import caddy
from shipway.backends.docker.records import read_tree
from shipway.engine import Rolled, RolledBack
from tests.backends.docker.conftest import SLOT, Deployment, Lines, free_port, servers_started
from tests.backends.docker.test_https import self_signed
from tests.backends.docker.test_interrupt import cli
from tests.backends.local.conftest import eventually
from tests.backends.local.test_canary import APP
from tests.loops import RequestLoop, beyond_reload_race

#: the local canary tests' app, listening on every address of its container, its release
#: named by VERSION
SERVER = APP.replace('"127.0.0.1"', '"0.0.0.0"').replace('"SHIPWAY_RELEASE"', '"VERSION"')

PROCESSES = """
[processes.web]
command = "python3 /server.py"
port = 8080
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 100
"""


def host_name(d: Deployment) -> str:
    """The test's own route host: a hostname is owned by one slot on a Docker host, whatever
    its proxy port, so tests running at once must not share one."""
    return f"{d.name}.canary.test"


def write(
    d: Deployment,
    version: str,
    broken: bool = False,
    step_time: str = "1s",
    batch: str = "",
    delay: int = 0,
    more: str = "",
    tls_port: int = 0,
) -> None:
    """The app as ``version`` (its / failing when ``broken``, answering after ``delay``
    seconds); ``more``: further keys of the canary's table; ``tls_port``: its route over
    HTTPS there, with the certificate and key in ``SHOP_CERT`` and ``SHOP_KEY``."""
    tls, secrets = "", ""
    if tls_port:
        tls = 'tls = { cert = "SHOP_CERT", key = "SHOP_KEY" }'
        secrets = "[secrets]\n" + "".join(
            f'{name} = {{ from_env = "{name}" }}\n' for name in ("SHOP_CERT", "SHOP_KEY")
        )
        batch = f"proxy_tls_port = {tls_port}\n{batch}"
    d.write(
        image=d.env.images.python,
        processes=PROCESSES,
        extra=f"""
[env]
VERSION = "{version}"
BROKEN = "{int(broken)}"
DELAY = "{delay}"
PORT = "8080"
[files]
"server.py" = '''{SERVER}'''
[[routes]]
host = "{host_name(d)}"
process = "web"
{tls}
{secrets}
""",
        slot_extra=f"""{batch}
strategy = "canary"
[slots.{SLOT}.canary]
steps = [10, 50, 100]
step_time = "{step_time}"
step_requests = 20
error_ratio = 10
{more}
""",
    )


def get(
    d: Deployment,
    i: int,
    headers: dict[str, str] | None = None,
    tls: tuple[int, Path] | None = None,
) -> tuple[int, str, str | None]:
    """(status, body, the cookie set) of one request to host a (even ``i``) or b (odd);
    ``tls``: over HTTPS at that port, trusting that certificate file only."""
    host = (d.env.a, d.env.b)[i % 2]
    conn = http.client.HTTPConnection(host.address, d.port, timeout=10)
    if tls is not None:
        context = ssl.create_default_context(cafile=str(tls[1]))
        context.check_hostname = False  # the host's address dialled, the name as SNI below
        raw = socket.create_connection((host.address, tls[0]), timeout=10)
        conn = http.client.HTTPConnection(host.address, tls[0], timeout=10)
        conn.sock = context.wrap_socket(raw, server_hostname=host_name(d))
    try:
        conn.request("GET", "/", headers={"Host": host_name(d), **(headers or {})})
        response = conn.getresponse()
        body = response.read().decode()
        return response.status, body, response.getheader("Set-Cookie")
    finally:
        conn.close()


def answered(d: Deployment, i: int) -> tuple[int, str]:
    status, body, _ = get(d, i)
    return status, body


def canaries_in_proxies(d: Deployment) -> list[dict[str, Any]]:
    found = []
    for host in (d.env.a, d.env.b):
        for proxy in d.containers(host, kind="proxy"):
            for part in caddy.parse_parts(read_tree(proxy, caddy.CONFIG_DIR)).values():
                found += [e["canary"] for e in part.values() if e.get("canary")]
    return found


def web_versions(d: Deployment) -> Counter[str]:
    """The running web containers' VERSION, over both hosts."""
    seen: Counter[str] = Counter()
    for host in (d.env.a, d.env.b):
        for c in d.containers(host, kind="app"):
            if c.status == "running":
                env = dict(e.split("=", 1) for e in c.attrs["Config"]["Env"])
                seen[env.get("VERSION", "?")] += 1
    return seen


def deploy_under_load(
    d: Deployment, lines: Lines, then: int
) -> tuple[Any, RequestLoop, int, list[int]]:
    """v1 deployed, then the spec as written deployed under a request loop over both hosts
    (50 a second), ``then`` more requests after it: (its outcome, the loop, the requests
    before it ended, how many configs each host's proxy had loaded before it minus after)."""
    spec = d.spec_file.read_text()
    write(d, "v1")
    assert isinstance(d.deploy(), Rolled)  # a first deploy: nothing to compare, rolled
    assert answered(d, 0) == (200, "v1") and answered(d, 1) == (200, "v1")
    before = loads(d)
    d.spec_file.write_text(spec)
    with RequestLoop(lambda i: answered(d, i), rate=50) as load:
        eventually(lambda: load.done > 20, what="the request loop")
        outcome = d.deploy(lines)
        after = load.done
        eventually(lambda: load.done > after + then, what="requests after the deploy")
    return outcome, load, after, [b - a for b, a in zip(loads(d), before, strict=True)]


def loads(d: Deployment) -> list[int]:
    """How many times each host's proxy started its servers (at its start and at each
    config load)."""
    return [servers_started(p) for h in (d.env.a, d.env.b) for p in d.containers(h, kind="proxy")]


def test_a_fully_broken_canary_is_aborted_within_a_few_failed_requests(
    deployment: Deployment,
) -> None:
    d, lines = deployment, Lines()
    write(d, "v2", broken=True)
    outcome, load, after, loaded = deploy_under_load(d, lines, 40)
    assert isinstance(outcome, RolledBack), lines.text()
    assert outcome.exit_code == 10
    assert "aborted at 10%" in lines.text() and "CanaryAborted" in lines.text(), lines.text()
    failed = load.failed()
    assert failed, "the broken canary got no request: the split did not happen"
    broken = [a for a in failed if a.body == "broken"]
    assert 3 <= len(broken) <= 10, failed  # error_ratio 10: the 3rd bad answer decides
    other = [a.body for a in failed if a.body != "broken"]
    # the share set and taken back by files alone, on both hosts: no config loaded, so no
    # request lost to a reload
    assert loaded == [0, 0] and other == [], (loaded, other)
    # after the abort: the stable alone on both hosts, the canary's containers gone
    late = load.answers[after:]
    assert {a.body for a in late if a.status == 200} == {"v1"}
    assert [a.body for a in late if a.status != 200] == []
    assert canaries_in_proxies(d) == []
    eventually(lambda: set(web_versions(d)) == {"v1"}, what="only the stable's containers")
    r2 = d.backend().read_records(d.app().slots.target(SLOT))[-1]
    assert r2.status.value == "failed"
    step = r2.canary[0]
    assert step["verdict"] == "abort" and step["canary"]["bad"] >= 3
    assert step["stable"]["requests"] > 0


def test_a_canary_that_never_answers_is_aborted_once_its_answer_timeout_passes(
    deployment: Deployment,
) -> None:
    d, lines = deployment, Lines()
    # v2 answers its health check but no request for 10 minutes; without the answer
    # timeout its requests would hang until the client gives up, and the step would end
    # inconclusive after 30 s (nothing answered, nothing counted)
    write(d, "v2", delay=600, more='answer_timeout = "1s"\ntimeout = "30s"')
    outcome, load, _, _ = deploy_under_load(d, lines, then=20)
    assert isinstance(outcome, RolledBack), lines.text()
    text = lines.text()
    assert "CanaryAborted" in text and "CanaryInconclusive" not in text, text
    failed = load.failed()
    # each cut by the hosts' Caddy after 1 s with its 504, counted against the canary
    cut = [a for a in failed if a.status == 504]
    assert 3 <= len(cut) <= 10, failed
    other = [a.body for a in failed if a.status != 504]
    assert beyond_reload_race(other, 4) == [], other  # a shift and the abort, two hosts
    r2 = d.backend().read_records(d.app().slots.target(SLOT))[-1]
    step = r2.canary[0]
    assert step["verdict"] == "abort" and step["canary"]["failures"] >= 3, step
    eventually(lambda: set(web_versions(d)) == {"v1"}, what="only the stable's containers")
    assert [answered(d, i) for i in range(4)] == [(200, "v1")] * 4


def test_a_good_canary_walks_its_steps_to_100_under_a_request_loop(
    deployment: Deployment,
) -> None:
    d, lines = deployment, Lines()
    write(d, "v2")
    outcome, load, after, loaded = deploy_under_load(d, lines, 20)
    assert isinstance(outcome, Rolled), lines.text()
    assert "canary 10%" in lines.text() and "canary 50%" in lines.text(), lines.text()
    # shifts to 10 and 50 %, the switch to 100 %: files only on both hosts, no request lost
    assert loaded == [0, 0] and load.failed() == [], (loaded, load.failed())
    served = Counter(a.body for a in load.answers)
    assert served["v1"] > 0 and served["v2"] > 0
    assert {a.body for a in load.answers[after:] if a.status == 200} == {"v2"}
    assert canaries_in_proxies(d) == []
    eventually(lambda: set(web_versions(d)) == {"v2"}, what="the stable's containers gone")
    r2 = d.backend().read_records(d.app().slots.target(SLOT))[-1]
    assert r2.status.value == "deployed"
    assert [s["percent"] for s in r2.canary] == [10, 50]
    assert all(s["verdict"] == "promote" for s in r2.canary)


def test_with_a_batch_the_canary_runs_where_its_containers_do(deployment: Deployment) -> None:
    """batch = 1: the hosts roll one after the other, so at the canary's steps only the
    first host runs the new release's containers: the canary is split there alone (the
    second host's route switches when its batch rolls), never sent to containers that are
    not there."""
    d, lines = deployment, Lines()
    write(d, "v2", batch="batch = 1")
    outcome, load, after, loaded = deploy_under_load(d, lines, 20)
    assert isinstance(outcome, Rolled), lines.text()
    shares = [t for t in lines.text().splitlines() if f"10% of {host_name(d)} on" in t]
    assert len(shares) == 1 and "," not in shares[0], shares  # one host split
    assert loaded == [0, 0] and load.failed() == [], (loaded, load.failed())
    assert {a.body for a in load.answers[after:] if a.status == 200} == {"v2"}
    r2 = d.backend().read_records(d.app().slots.target(SLOT))[-1]
    assert [s["verdict"] for s in r2.canary] == ["promote", "promote"]


def held_canary(d: Deployment, tls_port: int = 0) -> subprocess.Popen[str]:
    """v1 deployed, then v2's deploy (the CLI) holding its canary at 10 % (a long step)."""
    write(d, "v1", tls_port=tls_port)
    assert isinstance(d.deploy(), Rolled)
    write(d, "v2", step_time="10m", tls_port=tls_port)
    deploy = cli(d, "deploy", SLOT)

    def at_ten() -> bool:
        assert deploy.poll() is None, deploy.communicate()[0]
        doc = api_status(d)  # analysed: the share is set on both hosts
        return bool(doc["running"] and doc["percent"] == 10 and doc["analysis"])

    eventually(at_ten, timeout=120, what="the canary at 10%")
    return deploy


def api_status(d: Deployment) -> dict[str, Any]:
    from shipway import canary

    return canary.status(d.app(), SLOT)


def test_cookie_header_and_counts_summed_over_both_hosts(deployment: Deployment) -> None:
    d = deployment
    deploy = held_canary(d)
    try:
        # the tester's header, on both hosts
        for i in range(4):
            assert answered_with(d, i, {"X-Shipway-Canary": "always"}) == "v2"
            assert answered_with(d, i, {"X-Shipway-Canary": "never"}) == "v1"
        # a client without the cookie gets one; with it, it stays on its release (both hosts)
        # 10 % of new clients on the canary, drawn at random: both releases seen within 200
        # clients but once in 10^9 runs
        sides: dict[str, str] = {}
        for i in range(200):
            status, body, cookie = get(d, i)
            assert status == 200 and cookie and cookie.startswith("shipway-canary="), cookie
            value = cookie.split(";")[0]
            assert {get(d, j, {"Cookie": value})[1] for j in range(4)} == {body}
            sides[value] = body
            if set(sides.values()) == {"v1", "v2"}:
                break
        assert set(sides.values()) == {"v1", "v2"}, sides

        # the counts are both hosts' summed: 5 canary requests on each host add 10
        def canary_requests() -> int:
            return int(api_status(d)["counts"]["on_canary"]["requests"])

        before = canary_requests()
        eventually(lambda: canary_requests() == before, what="the counts settled")
        before = canary_requests()
        for i in range(10):
            assert answered_with(d, i, {"X-Shipway-Canary": "always"}) == "v2"
        eventually(lambda: canary_requests() == before + 10, what="10 more canary requests")
        status = api_status(d)
        assert status["deploy_alive"] and status["analysis"]["tests"][0]["test"] == "errors"
        assert status["counts"]["stable"]["requests"] > 0
    finally:
        if deploy.poll() is None:
            decided = cli(d, "canary", "abort", SLOT)
            decided.communicate(timeout=120)
        out, _ = deploy.communicate(timeout=180)
    assert deploy.returncode == 10, out
    assert {answered(d, i)[1] for i in range(10)} == {"v1"}
    assert canaries_in_proxies(d) == []


def answered_with(d: Deployment, i: int, headers: dict[str, str]) -> str:
    status, body, _ = get(d, i, headers)
    assert status == 200, (status, body)
    return body


@pytest.mark.parametrize("verdict", ["abort", "promote"])
def test_a_canary_left_by_a_killed_deploy_ends_with_one_release_serving(
    deployment: Deployment, verdict: str
) -> None:
    d = deployment
    deploy = held_canary(d)
    os.kill(deploy.pid, signal.SIGKILL)
    deploy.communicate(timeout=10)
    # left behind: the split goes on (both releases still run), nobody decides it
    assert answered_with(d, 0, {"X-Shipway-Canary": "always"}) == "v2"
    status = api_status(d)
    assert status["running"] and not status["deploy_alive"]
    decided = cli(d, "canary", verdict, SLOT, "-o", "json")
    out, _ = decided.communicate(timeout=240)
    assert decided.returncode == 0, out
    serving = "v1" if verdict == "abort" else "v2"
    assert {answered(d, i)[1] for i in range(20)} == {serving}
    assert {answered_with(d, i, {"X-Shipway-Canary": "always"}) for i in range(4)} == {serving}
    assert canaries_in_proxies(d) == []
    assert not api_status(d)["running"]
    eventually(lambda: set(web_versions(d)) == {serving}, what="one release's containers")
    records = d.backend().read_records(d.app().slots.target(SLOT))
    assert records[-1].status.value == ("failed" if verdict == "abort" else "deployed")


def test_an_https_route_s_canary_splits_its_secure_entries_with_no_config_loaded(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A route of HTTPS names (a certificate given by secrets) on both hosts: its canary
    splits the secure entries by their files, as a plain route's does the pool's."""
    d, tls_port = deployment, free_port()
    cert_file, key_file = self_signed(host_name(d), tmp_path)
    monkeypatch.setenv("SHOP_CERT", cert_file.read_text())
    monkeypatch.setenv("SHOP_KEY", key_file.read_text())

    def over_https(i: int, headers: dict[str, str]) -> tuple[str, str | None]:
        status, body, cookie = get(d, i, headers, tls=(tls_port, cert_file))
        assert status == 200, (status, body)
        return body, cookie

    deploy = held_canary(d, tls_port)
    try:
        before = loads(d)  # the canary set at 10 % on both hosts
        for i in range(4):
            assert over_https(i, {"X-Shipway-Canary": "always"})[0] == "v2"
            assert over_https(i, {"X-Shipway-Canary": "never"})[0] == "v1"
            body, cookie = over_https(i, {})
            assert cookie and cookie.startswith("shipway-canary="), cookie
            kept = {"Cookie": cookie.split(";")[0]}
            assert {over_https(j, kept)[0] for j in range(4)} == {body}
        decided = cli(d, "canary", "abort", SLOT)
        decided.communicate(timeout=120)
    finally:
        out, _ = deploy.communicate(timeout=180)
    assert deploy.returncode == 10, out
    assert {over_https(i, {})[0] for i in range(4)} == {"v1"}
    assert {over_https(i, {"X-Shipway-Canary": "always"})[0] for i in range(4)} == {"v1"}
    assert canaries_in_proxies(d) == []
    # the abort took the share back by files alone; and the proxies' first configs had the
    # secure entries, so nothing of the route or its canary loaded a config
    assert loads(d) == before
    for host in (d.env.a, d.env.b):
        (proxy,) = d.containers(host, kind="proxy")
        config = json.loads(read_tree(proxy, caddy.CONFIG_DIR)[caddy.CONFIG_FILE][0])
        assert servers_started(proxy) == len(config["apps"]["http"]["servers"])
