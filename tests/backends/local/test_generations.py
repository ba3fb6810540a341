"""Blue/green generations on this machine: real processes, real HTTP on loopback.

A slot with ``strategy = "blue-green"`` keeps each release as a generation: the new one
starts beside the live one, passes the health gate, and only then takes the hosts; the old
one is put to sleep (its processes stopped, its records and snapshot kept) and can be
switched back to through the same gate. Every command runs through the CLI in a
subprocess, except where a step has to be disturbed at an exact moment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from shipway import api
from shipway.backends.local import LocalBackend
from shipway.backends.local.router_control import RouterControl
from shipway.engine import Rolled
from tests.backends.local.conftest import Slot, blog_serving_hello, eventually
from tests.backends.local.test_zero_downtime import Client

BLUE_GREEN = """
[slots.local]
strategy = "blue-green"
sleep_after = "0.3s"
"""


@pytest.fixture
def bg(slot: Slot) -> Slot:
    """The hello app (and its failing twin) in a blue-green ``local`` slot."""
    for spec in (slot.spec, slot.app_dir / "shipway-failing.toml"):
        spec.write_text(spec.read_text() + BLUE_GREEN)
    return slot


def gens(slot: Slot) -> list[dict[str, Any]]:
    return list(slot.json("gens", "local")["generations"])


def states(slot: Slot) -> dict[str, str]:
    return {g["name"]: g["state"] for g in gens(slot)}


def rows(slot: Slot, generation: str) -> list[dict[str, Any]]:
    """``status`` rows (one per instance, or one per asleep process) of a generation."""
    return [r for r in slot.status()["processes"] if r["generation"] == generation]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def deploy_greeting(slot: Slot, greeting: str) -> None:
    slot.edit_spec('GREETING = "hello"', f'GREETING = "{greeting}"')
    try:
        slot.deploy()
    finally:
        slot.edit_spec(f'GREETING = "{greeting}"', 'GREETING = "hello"')


def router(slot: Slot) -> RouterControl:
    return RouterControl(slot.state, slot.port, slot.supervisor())


def test_two_deploys_make_two_generations_one_live_one_asleep(bg: Slot) -> None:
    r = bg.deploy()
    assert "nothing to drop or put to sleep" in r.out
    first = gens(bg)
    assert [(g["state"], g["release"]) for g in first] == [("live", 1)]
    g1 = first[0]["name"]
    assert g1.startswith("local-")
    pids = [row["pid"] for row in rows(bg, g1)]
    assert len(pids) == 2 and all(pids)

    deploy_greeting(bg, "two")
    assert bg.get("/") == (200, "two from r2\n")
    listed = gens(bg)
    assert [(g["name"], g["state"], g["release"]) for g in listed] == [
        (g1, "asleep", 1),
        (listed[1]["name"], "live", 2),
    ]
    # asleep: its processes are not running, its records and snapshot are kept
    assert [(row["process"], row["state"], row.get("pid")) for row in rows(bg, g1)] == [
        ("web", "asleep", None),
        ("worker", "asleep", None),
    ]
    assert not any(alive(pid) for pid in pids)
    assert (bg.state / "hello" / "local" / "releases" / "r1").is_dir()
    text = bg.run("gens", "local")
    assert text.code == 0
    assert text.out.split("\n")[0].split() == ["NAME", "STATE", "RELEASE", "AGE"]
    assert any(line.split()[:3] == [g1, "asleep", "1"] for line in text.out.splitlines())
    assert all(line.split()[-1][-1] in "smhd" for line in text.out.splitlines()[1:] if line)


def test_a_generation_failing_its_health_gate_leaves_the_live_one_and_the_routes(
    bg: Slot,
) -> None:
    bg.deploy()
    g1 = gens(bg)[0]["name"]
    table = router(bg).table_file("hello", "local", g1)
    claim_before = table.read_text()
    pids = {row["process"]: row["pid"] for row in rows(bg, g1)}

    r = bg.deploy(expect=10, spec=bg.app_dir / "shipway-failing.toml")
    assert "web: HealthcheckFailed: GET /up answered 500" in r.out
    assert "point hello.localhost" in r.out  # it was planned ...
    assert "] point hello.localhost" not in r.out  # ... and never done
    assert bg.get("/") == (200, "hello from r1\n")
    assert table.read_text() == claim_before  # the route was not touched at all
    assert sorted(t.name for t in router(bg).tables.iterdir()) == sorted(
        [table.name, "hello.local.json"]
    )  # no claim of the failed generation was ever written
    failed = [g for g in gens(bg) if g["name"] != g1]
    assert [(g["state"], g["release"]) for g in failed] == [("asleep", 2)]
    assert {row["process"]: row["pid"] for row in rows(bg, g1)} == pids  # untouched
    assert [(h["revision"], h["status"], h["generation"]) for h in bg.history()] == [
        (1, "deployed", g1),
        (2, "failed", failed[0]["name"]),
    ]
    # a generation that never went live cannot be switched to (exit 2)
    r = bg.run("switch", "local", failed[0]["name"])
    assert r.code == 2 and "never went live" in r.err


def test_switch_back_and_forth_under_load_fails_no_request(bg: Slot) -> None:
    bg.deploy()
    deploy_greeting(bg, "two")
    g1, g2 = (g["name"] for g in gens(bg))
    clients = [Client(bg.port) for _ in range(3)]
    for c in clients:
        c.start()
    try:
        eventually(lambda: all(c.bodies["two from r2"] for c in clients), 60, "load on r2")
        back = bg.run("switch", "local", g1)
        assert back.code == 0, back.text
        assert "rolled hello/local from r2 to r3" in back.out
        assert states(bg) == {g1: "live", g2: "asleep"}
        eventually(lambda: all(c.bodies["hello from r1"] for c in clients), 60, "load on r1")
        restart = bg.run("restart", "local", "web")  # inside the live generation
        assert restart.code == 0, restart.text
        assert "hello.localhost now served by" in restart.out
        eventually(lambda: all(c.bodies["hello from r4"] for c in clients), 60, "restarted web")
        forth = bg.run("switch", "local", g2)
        assert forth.code == 0, forth.text
        eventually(lambda: sum(c.bodies["two from r2"] for c in clients) > 300, 60, "back on r2")
    finally:
        for c in clients:
            c.stop.set()
        for c in clients:
            c.join(timeout=30)
    failures = [f for c in clients for f in c.failures]
    served = sum(c.ok for c in clients)
    assert failures == [], f"{len(failures)} failed requests of {served + len(failures)}"
    assert served > 300, "the load was too light to mean anything"
    assert states(bg) == {g1: "asleep", g2: "live"}
    history = [
        (h["revision"], h["status"], h["generation"], h["description"]) for h in bg.history()
    ]
    assert history[2:] == [
        (3, "superseded", g1, f"switch to {g1} (r1); {g2} goes to sleep"),
        (4, "superseded", g1, "restart web"),
        (5, "deployed", g2, f"switch to {g2} (r2); {g1} goes to sleep"),
    ]


def test_sleep_and_wake_never_move_traffic_and_the_live_one_cannot_sleep(bg: Slot) -> None:
    bg.deploy()
    deploy_greeting(bg, "two")
    g1, g2 = (g["name"] for g in gens(bg))

    woke = bg.run("wake", "local", g1)
    assert woke.code == 0, woke.text
    assert f"{g1} is awake (no traffic moved)" in woke.out
    assert states(bg) == {g1: "awake", g2: "live"}
    awake = rows(bg, g1)
    assert {(row["process"], row["state"], row["health"]) for row in awake} == {
        ("web", "running", "ok"),
        ("worker", "running", "running"),
    }
    assert bg.get("/") == (200, "two from r2\n")

    slept = bg.run("sleep", "local", g1)
    assert slept.code == 0, slept.text
    assert states(bg) == {g1: "asleep", g2: "live"}
    assert not any(alive(row["pid"]) for row in awake)

    refused = bg.run("sleep", "local", g2)
    assert refused.code == 2
    assert f"generation '{g2}' is live: switch to another one first" in refused.err
    assert bg.get("/") == (200, "two from r2\n")
    unknown = bg.run("wake", "local", "local-nope")
    assert unknown.code == 2 and g1 in unknown.err and g2 in unknown.err


def test_gc_keeps_the_live_generation_and_snapshots_live_as_long_as_their_generation(
    bg: Slot,
) -> None:
    for n in range(6):  # one more than the 5 snapshots a rolling slot keeps
        deploy_greeting(bg, f"v{n + 1}")
    names = [g["name"] for g in gens(bg)]
    releases = bg.state / "hello" / "local" / "releases"
    assert sorted(p.name for p in releases.iterdir() if p.is_dir()) == [
        f"r{n}" for n in range(1, 7)
    ]
    # the oldest generation still has its snapshot: switching back to it works
    r = bg.run("switch", "local", names[0])
    assert r.code == 0, r.text
    assert bg.get("/") == (200, "v1 from r1\n")

    r = bg.run("gc", "local", "--keep", "1", "-o", "json")
    assert r.code == 0, r.text
    assert sorted(json.loads(r.out)["deleted"]) == names[1:5]  # names sort by age
    assert states(bg) == {names[0]: "live", names[5]: "asleep"}
    assert sorted(p.name for p in releases.iterdir() if p.is_dir()) == ["r1", "r6"]
    assert bg.get("/") == (200, "v1 from r1\n")
    r = bg.run("gc", "local", "--keep", "0")
    assert r.code == 0 and f"deleted 1 generation(s): {names[5]}" in r.out
    assert states(bg) == {names[0]: "live"}
    assert bg.get("/") == (200, "v1 from r1\n")


def test_a_host_served_by_another_app_is_refused_naming_it_unless_taken(bg: Slot) -> None:
    spec = blog_serving_hello(bg.app_dir, drop=BLUE_GREEN)
    r = bg.run("deploy", "local", spec=spec)
    assert r.code == 0, r.text
    assert bg.get("/") == (200, "blog from r1\n")

    refused = bg.run("deploy", "local")
    assert refused.code == 2, refused.text
    assert (
        f"host hello.localhost is served by blog/local (router 127.0.0.1:{bg.port}); "
        "refusing to take it (hint: pass --take-host" in refused.err
    )
    assert not any(".hello." in name for name in bg.programs())  # nothing was started
    assert bg.get("/") == (200, "blog from r1\n")

    taken = bg.run("deploy", "local", "--take-host")
    assert taken.code == 0, taken.text
    assert "taking host hello.localhost from blog/local" in taken.out
    assert bg.get("/") == (200, "hello from r1\n")
    assert router(bg).status()["owners"]["hello.localhost"]["app"] == "hello"


class DropRefusingReporter:
    """Prints like the CLI and, just before the old generation's route is dropped, makes
    the router's control channel refuse: its socket is moved away (the router keeps
    serving; it just cannot be told anything). It is put back before the old generation
    goes to sleep."""

    def __init__(self, control: RouterControl) -> None:
        self.control = control
        self.away = control.sock.with_name("control.sock.away")
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)
        if "] drop hello.localhost from generation" in text:
            os.replace(self.control.sock, self.away)
        elif "] put to sleep" in text and self.away.exists():
            os.replace(self.away, self.control.sock)

    def progress(self, process: str, counts: Any, note: str = "") -> None:
        pass


def test_a_drop_the_router_refuses_is_reported_with_the_fix_and_the_switch_succeeds(
    bg: Slot, monkeypatch: pytest.MonkeyPatch
) -> None:
    bg.deploy()
    g1 = gens(bg)[0]["name"]
    bg.edit_spec('GREETING = "hello"', 'GREETING = "two"')
    for key, value in bg.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(bg.app_dir)
    app = api.load(bg.spec)
    backend = LocalBackend(app, app.slots.get("local"), environ=bg.env)
    reporter = DropRefusingReporter(router(bg))

    outcome = api.deploy(app, "local", backend=backend, reporter=reporter)

    assert isinstance(outcome, Rolled) and outcome.exit_code == 0, reporter.lines
    assert len(outcome.warnings) == 1
    warning = outcome.warnings[0]
    assert f"drop hello.localhost from generation {g1} failed" in warning
    assert f"the router on 127.0.0.1:{bg.port} did not take the drop" in warning
    assert "to fix by hand: remove hello.localhost from" in warning
    assert f"curl --unix-socket {router(bg).sock} -X POST http://router/reload" in warning
    assert any(line.startswith("warning: ") for line in reporter.lines)
    # the switch went on: the new generation serves, the old one is asleep
    assert bg.get("/") == (200, "two from r2\n")
    g2 = next(g["name"] for g in gens(bg) if g["name"] != g1)
    assert states(bg) == {g1: "asleep", g2: "live"}
    assert [(h["revision"], h["status"]) for h in bg.history()] == [
        (1, "superseded"),
        (2, "deployed"),
    ]
    # the old claim is gone from the table files; the router, never told, may still hold
    # it, but it loses to the new one. The manual fix (a reload) is safe at any time.
    assert not router(bg).table_file("hello", "local", g1).exists()
    assert router(bg).status()["owners"]["hello.localhost"]["generation"] == g2
    router(bg).reload()
    assert router(bg).status()["owners"]["hello.localhost"]["generation"] == g2
    assert bg.get("/") == (200, "two from r2\n")


def test_exit_codes_of_generation_commands_through_the_cli(bg: Slot) -> None:
    failing = bg.app_dir / "shipway-failing.toml"
    r = bg.deploy(expect=12, spec=failing)  # no-anchor: nothing ran before it
    assert "nothing was running before it" in r.out
    assert bg.get("/")[0] == 404
    assert [g["state"] for g in gens(bg)] == ["asleep"]
    bg.deploy()
    live = next(g["name"] for g in gens(bg) if g["state"] == "live")
    noop = bg.run("switch", "local", live)
    assert noop.code == 0 and f"generation {live} is already live" in noop.out
    missing = bg.run("switch", "local", "local-19990101-000000", "-o", "json")
    assert missing.code == 2
    assert json.loads(missing.out)["error"]["exit_code"] == 2
    guarded = Path(bg.spec)
    guarded.write_text(guarded.read_text().replace(BLUE_GREEN, BLUE_GREEN + "guarded = true\n"))
    refused = bg.run("sleep", "local", live)
    assert refused.code == 3, refused.text  # the guard answers before anything else
    assert bg.run("gc", "local", "--keep", "0", "--confirm", "local").code == 0
    assert states(bg) == {live: "live"}
