"""``plan`` mutates nothing and starts nothing; ``promote`` ships exactly the promoted
snapshot to the next slot."""

from __future__ import annotations

import os
from pathlib import Path

from tests.backends.local.conftest import Slot


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in root.rglob("*")
        if p.is_file() and not p.name.endswith(".log")
    }


def test_plan_on_a_fresh_machine_creates_nothing_and_starts_nothing(slot: Slot) -> None:
    r = slot.run("plan", "local")
    assert r.code == 0, r.text
    assert "create program/web@" in r.out and "create route/hello.localhost" in r.out
    assert not slot.state.exists()
    assert not slot.supervisor().running()
    r = slot.run("status", "local")
    assert r.code == 0 and "nothing deployed" in r.out
    assert not slot.state.exists()


def test_plan_on_a_live_slot_changes_nothing(slot: Slot) -> None:
    slot.deploy()
    before_files = tree_state(slot.state)
    before_pids = {p: row["pid"] for p, row in slot.processes().items()}
    before_programs = slot.programs()
    slot.edit_spec('GREETING = "hello"', 'GREETING = "planned"')
    r = slot.run("plan", "local")
    assert r.code == 0, r.text
    assert f"hello.localhost: program/web@{slot.processes()['web']['deployment_id']}" in r.out
    assert tree_state(slot.state) == before_files
    assert slot.programs() == before_programs
    assert {p: row["pid"] for p, row in slot.processes().items()} == before_pids
    assert slot.get("/") == (200, "hello from r1\n")


def test_saved_plan_is_applied_or_refused_when_stale(slot: Slot) -> None:
    slot.deploy()
    plan = slot.app_dir.parent / "plan.json"  # outside the source, which it would change
    slot.edit_spec('GREETING = "hello"', 'GREETING = "howdy"')
    assert slot.run("plan", "local", "--out", str(plan)).code == 0
    slot.deploy("--force")  # the world moves on
    r = slot.run("deploy", "local", "--plan", str(plan))
    assert r.code == 5, r.text
    slot.edit_spec('GREETING = "howdy"', 'GREETING = "hiya"')
    assert slot.run("plan", "local", "--out", str(plan)).code == 0
    r = slot.run("deploy", "local", "--plan", str(plan))
    assert r.code == 0, r.text
    assert slot.get("/") == (200, "hiya from r3\n")


def test_promote_copies_exactly_the_promoted_snapshot(slot: Slot) -> None:
    slot.spec.write_text(
        slot.spec.read_text()
        + '\n[slots.local]\npromotes_to = "staging"\n\n[slots.staging]\nrole = "staging"\n'
    )
    slot.deploy()
    # the source moves on after local was deployed: promotion must not pick that up
    (slot.app_dir / "app.py").write_text(
        (slot.app_dir / "app.py").read_text().replace("from {RELEASE}", "(edited) from {RELEASE}")
    )
    r = slot.run("promote", "local")
    assert r.code == 0, r.text
    assert f"serving http://staging.hello.localhost:{slot.port}/" in r.out
    assert slot.get("/", host="staging.hello.localhost") == (200, "hello from r1\n")
    assert slot.get("/", host="hello.localhost") == (200, "hello from r1\n")
    local = slot.state / "hello" / "local" / "releases" / "r1"
    staging = slot.state / "hello" / "staging" / "releases" / "r1"
    assert (staging / "app.py").read_bytes() == (local / "app.py").read_bytes()
    assert "(edited)" not in (staging / "app.py").read_text()
    [promoted] = slot.json("history", "staging")["releases"]
    [source] = slot.history()
    assert promoted["digest"] == source["digest"]
    assert promoted["description"].startswith("promote local r1")
    # the staging processes run from the staging copy, not from local's
    row = slot.json("status", "staging")["processes"][0]
    assert os.readlink(f"/proc/{row['pid']}/cwd") == str(staging)
