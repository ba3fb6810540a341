"""The audit trail and freezes on the local backend, through the command line, with real
deploys: who made each release (OS user and host, the source's git commit and author, the
CI identity) and under which clearance is kept in the records and listed by ``shipway
audit``; a freeze kept in the target refuses every mutating command with exit code 8
until it is lifted or the glass is broken (and that is recorded)."""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from tests.backends.local.conftest import Slot


@pytest.fixture
def slot(hello: Slot) -> Slot:
    """The hello example deployed on the local backend (tests/cli/conftest.py)."""
    return hello


def git(slot: Slot, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "Ada Lovelace",
        "GIT_AUTHOR_EMAIL": "ada@example.org",
        "GIT_COMMITTER_NAME": "Ada Lovelace",
        "GIT_COMMITTER_EMAIL": "ada@example.org",
        "PATH": "/usr/bin:/bin",
        "HOME": str(slot.app_dir),
    }
    done = subprocess.run(
        ["git", "-C", str(slot.app_dir), *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def committed(slot: Slot) -> str:
    git(slot, "init", "-q")
    git(slot, "add", "-A")
    git(slot, "commit", "-q", "-m", "hello")
    return git(slot, "rev-parse", "HEAD")


def audit(slot: Slot, *args: str) -> list[dict[str, object]]:
    r = slot.run("audit", *args, "-o", "json")
    assert r.code == 0, r.text
    return list(json.loads(r.out)["records"])


def test_every_release_records_who_from_where_and_what_changed(slot: Slot) -> None:
    commit = committed(slot)
    slot.env.update(GITHUB_ACTIONS="true", GITHUB_ACTOR="octocat", GITHUB_REPOSITORY="o/hello")
    slot.env.update(GITHUB_RUN_ID="42", GITHUB_TOKEN="ghs_never_recorded")
    stream = slot.app_dir.parent / "events.jsonl"
    slot.env["SHIPWAY_EVENTS"] = str(stream)
    first = slot.deploy()
    events = [json.loads(line) for line in stream.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[:2] == ["started", "planned"] and kinds[-1] == "ended"
    assert kinds.count("ended") == 1 and "step" in kinds and "waiting" in kinds
    assert events[0]["who"]["ci"]["actor"] == "octocat"
    # the outcome the terminal printed is the stream's ``ended`` line, word for word
    assert events[-1]["line"] in first.out.splitlines()
    slot.edit_spec('GREETING = "hello"', 'GREETING = "hi"')
    slot.deploy()
    rows = audit(slot)
    assert [r["revision"] for r in rows] == [2, 1]  # newest first
    newest = rows[0]["audit"]
    assert isinstance(newest, dict)
    assert newest["user"] == getpass.getuser() and newest["host"] == socket.gethostname()
    assert newest["commit"] == commit + "+dirty"  # the spec was edited after the commit
    assert rows[1]["audit"]["commit"] == commit  # type: ignore[index]
    assert newest["author"] == "Ada Lovelace <ada@example.org>"
    assert newest["ci"] == {
        "system": "github-actions",
        "actor": "octocat",
        "project": "o/hello",
        "url": "https://github.com/o/hello/actions/runs/42",
    }
    assert newest["operation"] == "deploy" and newest["clearance"] == []
    assert "GREETING" in str(newest["summary"])
    assert rows[1]["summary"] == "first release"
    # kept in the target: the records file in the state dir holds it, not this terminal
    text = slot.run("audit").out
    assert "octocat" in text and "GREETING" in text
    assert "ghs_never_recorded" not in json.dumps(rows)


def test_a_freeze_refuses_every_change_until_lifted_and_break_glass_is_recorded(
    slot: Slot,
) -> None:
    slot.deploy()
    r = slot.run("freeze", "local", "--for", "2h", "--reason", "incident 4711", "-o", "json")
    assert r.code == 0, r.text
    until = json.loads(r.out)["freezes"][0]["until"]
    assert datetime.fromisoformat(until) > datetime.now(UTC) + timedelta(minutes=119)
    for command in (
        ["deploy", "local", "--force"],
        ["restart", "local"],
        ["rollback", "local", "1"],
        ["stop", "local"],
        ["destroy", "local", "--confirm", "local"],
    ):
        refused = slot.run(*command)
        assert refused.code == 8, (command, refused.text)
        assert "incident 4711" in refused.err and until in refused.err, refused.err
    assert slot.get()[0] == 200  # nothing was touched
    assert [h["revision"] for h in slot.history()] == [1]
    glass = slot.run("deploy", "local", "--force", "--break-glass", "hotfix for 4711")
    assert glass.code == 0, glass.text
    record = audit(slot)[0]
    assert record["revision"] == 2 and record["break_glass"] == "hotfix for 4711"
    assert record["audit"]["clearance"] == ["break-glass"]  # type: ignore[index]
    assert slot.run("unfreeze", "local").code == 0
    assert slot.run("restart", "local").code == 0


def test_a_declared_window_freezes_the_slot(slot: Slot) -> None:
    today = datetime.now(UTC).date()
    window = (
        f'\n[slots.local]\nfreeze = [{{ start = "{today - timedelta(days=1)}", '
        f'end = "{today + timedelta(days=1)}", reason = "release train" }}]\n'
    )
    slot.spec.write_text(slot.spec.read_text() + window)
    r = slot.run("deploy", "local", "-o", "json")
    assert r.code == 8, r.text
    error = json.loads(r.out)["error"]
    assert error["exit_code"] == 8 and "release train" in error["message"]
    assert "declared in the spec" in error["message"]
    assert slot.run("deploy", "local", "--break-glass", "urgent").code == 0
