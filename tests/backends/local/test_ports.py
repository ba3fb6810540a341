"""ports.json has one owner (PortTable): it hands ports out, takes them back, and rebuilds a
slot's entries from the slot's records, so a port a killed run was given comes back."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from shipway.backends.local.ports import PortTable, ephemeral_start, owner_prefix, port_span
from shipway.errors import BackendError, InputError
from tests.backends.local.conftest import Slot, free_port


def test_ports_handed_out_are_free_distinct_never_reserved_and_kept_until_released(
    tmp_path: Path,
) -> None:
    reserved = free_port()
    table = PortTable(tmp_path, reserved=(reserved,))
    first = table.allocate(3, "sw.shop.local.web.d1")
    second = table.allocate(2, "sw.shop.local.worker.d1")
    assert len(set(first + second)) == 5 and reserved not in first + second
    for port in first + second:  # free when handed out: nothing listens there
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    doc = json.loads((tmp_path / "ports.json").read_text())
    assert doc["version"] == 1
    assert doc["ports"][str(first[0])] == "sw.shop.local.web.d1"
    table.release(first)
    assert sorted(table.taken()) == sorted(second)


def test_rebuild_makes_a_slots_entries_what_its_records_hold_and_keeps_other_slots(
    tmp_path: Path,
) -> None:
    # an unversioned file, as the backend wrote it before the table had an owner
    (tmp_path / "ports.json").write_text(json.dumps({"ports": {
        "41001": "sw.shop.local.web.d1",      # recorded: stays
        "41002": "sw.shop.local.web.killed",  # a run killed before it recorded its program
        "41003": "sw.shop.staging.web.d1",    # another slot of the app: not this one's to judge
        "41004": "sw.blog.local.web.d9",      # another app
    }}))
    table = PortTable(tmp_path)
    recorded = {41001: "sw.shop.local.web.d1", 41005: "sw.shop.local.worker.d1"}
    assert table.rebuild(owner_prefix("shop", "local"), recorded) == [41002]
    assert table.taken() == {
        41001: "sw.shop.local.web.d1",
        41003: "sw.shop.staging.web.d1",
        41004: "sw.blog.local.web.d9",
        41005: "sw.shop.local.worker.d1",
    }


def test_a_port_leaked_by_a_killed_run_comes_back_at_the_next_start(slot: Slot) -> None:
    slot.deploy()
    ports_file = slot.state / "ports.json"
    doc = json.loads(ports_file.read_text())
    leaked, others = free_port(), free_port()
    doc["ports"][str(leaked)] = "sw.hello.local.web.killedrun"
    doc["ports"][str(others)] = "sw.blog.local.web.d9"
    ports_file.write_text(json.dumps(doc))

    r = slot.run("restart", "local", "web")  # a new web program: fresh ports
    assert r.code == 0, r.text

    taken = json.loads(ports_file.read_text())["ports"]
    programs = json.loads((slot.state / "hello" / "local" / "programs.json").read_text())
    recorded = {
        str(i["port"]) for p in programs["programs"].values() for i in p["instances"] if i["port"]
    }  # (0: a process without a port, which holds none)
    mine = {p for p, owner in taken.items() if owner.startswith("sw.hello.local.")}
    assert str(leaked) not in taken
    assert mine == recorded  # exactly the ports the slot's running programs hold
    assert taken[str(others)] == "sw.blog.local.web.d9"


def test_ports_come_from_their_span_below_the_ephemeral_range_and_skip_a_listener(
    tmp_path: Path,
) -> None:
    span = port_span({"SHIPWAY_LOCAL_PORTS": "19990-19999"}, ephemeral_start())
    assert span == range(19990, 20000) and span.stop <= ephemeral_start()
    with socket.socket() as listener:  # something listens on one of them: skipped
        listener.bind(("127.0.0.1", 0))
        held = listener.getsockname()[1]
        table = PortTable(tmp_path, span=range(held, held + 1))
        with pytest.raises(BackendError, match=f"no free loopback port in {held}-{held}"):
            table.allocate(1, "sw.shop.local.web.d1")
    with socket.socket() as listener:  # at another address: 0.0.0.0 would fail there too
        listener.bind(("127.0.0.2", 0))
        listener.listen()
        held = listener.getsockname()[1]
        with pytest.raises(BackendError, match=f"no free loopback port in {held}-{held}"):
            PortTable(tmp_path, span=range(held, held + 1)).allocate(1, "sw.shop.local.web.d1")
    table = PortTable(tmp_path, span=span)
    ports = table.allocate(4, "sw.shop.local.web.d1") + table.allocate(6, "sw.shop.local.web.d2")
    assert sorted(ports) == list(span)  # each once: the whole span, no port twice
    with pytest.raises(BackendError, match="set SHIPWAY_LOCAL_PORTS=LOW-HIGH"):
        table.allocate(1, "sw.shop.local.worker.d2")


def test_the_span_is_cut_below_the_ephemeral_ports_and_a_bad_one_is_refused() -> None:
    assert port_span({}, 32768) == range(10000, 20000)  # the default
    assert port_span({}, 15000) == range(10000, 15000)  # a kernel whose range starts lower
    assert port_span({"SHIPWAY_LOCAL_PORTS": " 30000-40000 "}, 32768) == range(30000, 32768)
    for bad in ("9-x", "20000", "20000-10000", "80-90", "60000-70000"):
        with pytest.raises(InputError, match="SHIPWAY_LOCAL_PORTS"):
            port_span({"SHIPWAY_LOCAL_PORTS": bad}, 32768)
    with pytest.raises(InputError, match="below the kernel's ephemeral ports"):
        port_span({"SHIPWAY_LOCAL_PORTS": "40000-41000"}, 32768)
    with pytest.raises(InputError, match=r"the default span 10000-19999: .* set SHIPWAY_LOCAL"):
        port_span({}, 9000)  # a kernel whose ephemeral ports start below the default


def test_a_bad_span_fails_the_deploy_with_exit_2_and_touches_nothing(slot: Slot) -> None:
    slot.env["SHIPWAY_LOCAL_PORTS"] = "9-x"
    r = slot.run("deploy", "local")
    assert r.code == 2, r.text
    assert "SHIPWAY_LOCAL_PORTS='9-x' is not a span of ports" in r.text
    assert not (slot.state / "ports.json").exists()
