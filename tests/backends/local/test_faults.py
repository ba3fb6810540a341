"""supervisord's XML-RPC under faults (a fault proxy in front of its real unix socket): the
local backend's edge retries what may be repeated, and never takes a daemon that answered
badly once for a daemon that is gone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shipway.backends.local.supervisor import Supervisor
from shipway.errors import BackendError
from tests.backends.local.conftest import Slot
from tests.engine.test_sequencing import Lines
from tests.testenv.faults import FaultProxy, docker_proxy


@pytest.fixture
def faulty(slot: Slot, tmp_path: Path) -> Iterator[tuple[Supervisor, FaultProxy, Lines]]:
    slot.deploy()
    real = slot.supervisor()
    # the proxy speaks plain HTTP on a unix socket: what supervisord's XML-RPC is
    proxy, url = docker_proxy(f"unix://{real.sock}", tmp_path / "proxy", "supervisor")
    through = Supervisor(real.dir)
    through.sock = Path(url.removeprefix("unix://"))
    lines = Lines()
    through.policy.reporter = lines
    try:
        yield through, proxy, lines
    finally:
        proxy.stop()


@pytest.mark.parametrize("fault", [{"reset": "after"}, {"reset": "before"}, {"status": 500}])
def test_a_read_cut_once_is_asked_again(
    faulty: tuple[Supervisor, FaultProxy, Lines], fault: dict[str, object]
) -> None:
    through, proxy, lines = faulty
    proxy.rule(method="POST", **fault)  # info() is one read: it is cut once
    programs = [n for n in through.info() if n.startswith("sw.")]
    assert len(programs) == 2, proxy.log()
    assert [c.fault for c in proxy.faults()] != []
    assert any(line.startswith("retrying supervisord getAllProcessInfo") for line in lines.lines)


def test_a_daemon_that_answered_badly_once_is_still_running(
    faulty: tuple[Supervisor, FaultProxy, Lines],
) -> None:
    """Taking it for gone would start a second supervisord beside it."""
    through, proxy, _ = faulty
    proxy.rule(method="POST", reset="after")
    assert through.running()
    assert len(proxy.faults()) == 1


def test_adding_a_program_is_repeated_only_once_the_daemon_shows_it_did_not_land(
    faulty: tuple[Supervisor, FaultProxy, Lines],
) -> None:
    """An add whose answer was lost is not sent again when the daemon lists the group (a
    blind repeat would remove and re-add the program); one that never arrived is."""
    through, proxy, lines = faulty
    (group,) = {n.split(":")[0] for n in through.info() if n.startswith("sw.") and "web" in n}
    proxy.reset_log()
    proxy.rule(method="POST", reset="after", times=None)
    with pytest.raises(BackendError, match="did not answer addProcessGroup"):
        through._call("addProcessGroup", "sw.nothing")  # no landed check: never repeated
    assert len(proxy.calls) == 1 and not lines.lines

    proxy.clear()
    proxy.reset_log()
    proxy.rule(method="POST", reset="after")  # landed (already there), answer lost
    assert through._call("addProcessGroup", group, landed=lambda: group in through._groups())
    assert len(proxy.calls) == 2  # the add, then the list that showed it landed
    assert any("retrying supervisord addProcessGroup" in line for line in lines.lines)
