"""Problems found before anything moves: a router port another program holds is refused at
plan time, naming the holder; a declared host that will not resolve here is printed with a
curl line that works."""

from __future__ import annotations

import http.client
import os
import re
import socket
from collections.abc import Iterator

import pytest

from tests.backends.local.conftest import Slot


@pytest.fixture
def squatter() -> Iterator[int]:
    """A port this test process listens on, as another program would."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_a_router_port_another_program_holds_is_found_at_plan_time(
    hello: Slot, squatter: int
) -> None:
    hello.env["SHIPWAY_ROUTER_PORT"] = str(squatter)
    for command in ("plan", "deploy"):
        r = hello.run(command)
        assert r.code == 2, r.text
        assert f"router port {squatter} is held by pid {os.getpid()} (" in r.err
        assert "nothing was changed" in r.err and "SHIPWAY_ROUTER_PORT" in r.err
    # refused before anything moved: no release recorded, no supervisord started
    assert not (hello.state / "hello" / "local" / "records.json.gz").exists()
    assert not (hello.state / "supervisor" / "supervisord.pid").exists()


def test_a_host_that_does_not_resolve_here_gets_a_working_curl_line(hello: Slot) -> None:
    host = "shop.example.invalid"  # RFC 6761: never resolves
    text = hello.spec.read_text()
    hello.spec.write_text(
        text.replace("[env]", f'[[routes]]\nhost = "{host}"\nprocess = "web"\n\n[env]')
    )
    plan = hello.run("plan")
    assert plan.code == 0, plan.text
    curl = f"curl -H 'Host: {host}' http://127.0.0.1:{hello.port}/"
    assert f"note: {host} does not resolve to this machine; to reach it: {curl}" in plan.out
    deployed = hello.deploy()
    assert curl in deployed.out
    # the line works: what it sends reaches the app
    m = re.search(r"curl -H 'Host: (\S+)' http://127\.0\.0\.1:(\d+)/", deployed.out)
    assert m is not None
    conn = http.client.HTTPConnection("127.0.0.1", int(m.group(2)), timeout=10)
    conn.request("GET", "/", headers={"Host": m.group(1)})
    response = conn.getresponse()
    assert (response.status, response.read().decode()) == (200, "hello from r1\n")
    conn.close()


def test_a_localhost_name_needs_no_hint(hello: Slot) -> None:
    plan = hello.run("plan")
    assert plan.code == 0 and "does not resolve" not in plan.out
    assert "curl -H" not in hello.deploy().out
