"""What a plan says changed, on this machine's processes, through the real CLI: "no
changes" applies nothing and records nothing; env, secrets and config files show as they
should (a secret named, its value in no output, JSON or record); ``diff`` and
``history --verbose`` work from the records after the snapshots are gone."""

from __future__ import annotations

import fcntl
import gzip
import json
import shutil
from pathlib import Path

from tests.backends.local.conftest import Slot, web_environ

CANARY_OLD = "tok-canary-local-old-6f1d2a"
CANARY_NEW = "tok-canary-local-new-93c7e0"
SECRET_AND_FILES = """
[secrets]
API_TOKEN = { from_env = "HELLO_API_TOKEN" }

[files]
"config/app.ini" = "token=${secrets.API_TOKEN}\\n"
"config/plain.txt" = "one\\ntwo\\nthree\\n"
"""


def records_text(slot: Slot) -> str:
    stored = slot.state / "hello" / "local" / "records.json.gz"
    return gzip.decompress(stored.read_bytes()).decode()


def with_token(slot: Slot, value: str) -> None:
    slot.env["HELLO_API_TOKEN"] = value


def test_an_unchanged_slot_plans_no_changes_and_deploy_makes_no_revision(slot: Slot) -> None:
    slot.deploy()
    pids = {p: row["pid"] for p, row in slot.processes().items()}
    programs = slot.programs()

    r = slot.run("plan", "local", "--detailed-exitcode")
    assert r.code == 0, r.text
    assert r.out.splitlines()[0] == "deploy hello to slot local (local): no changes"
    doc = slot.json("plan", "local")
    assert (doc["no_changes"], doc["changes"], doc["compared_with"]) == (True, [], 1)

    r = slot.deploy()
    assert "no changes: hello/local already runs what this deploy would run (r1)" in r.out
    assert "no revision recorded" in r.out
    assert [h["revision"] for h in slot.history()] == [1]
    assert slot.programs() == programs
    assert {p: row["pid"] for p, row in slot.processes().items()} == pids
    with (slot.state / "hello" / "local" / "lock").open("a") as lock:  # released: free to take
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    r = slot.run("repair", "local")
    assert r.code == 0 and "no changes: hello/local runs r1 as recorded" in r.out, r.text
    assert [h["revision"] for h in slot.history()] == [1]

    r = slot.deploy("--force")
    assert "rolled hello/local from r1 to r2" in r.out
    assert slot.get("/") == (200, "hello from r2\n")


def test_an_env_change_shows_old_and_new(slot: Slot) -> None:
    slot.deploy()
    slot.edit_spec('GREETING = "hello"', 'GREETING = "howdy"\nFEATURE_X = "1"')
    r = slot.run("plan", "local", "--detailed-exitcode")
    assert r.code == 6, r.text
    assert '    app: env GREETING "hello" → "howdy"' in r.out.splitlines()
    assert '    app: env FEATURE_X added: "1"' in r.out.splitlines()
    doc = slot.json("deploy", "local", "--dry-run")
    assert {"unit": "app", "field": "env.GREETING", "kind": "changed", "old": "hello",
            "new": "howdy", "masked": False, "lines": []} in doc["changes"]  # fmt: skip
    assert doc["no_changes"] is False
    slot.deploy()
    [_, second] = slot.json("history", "local", "--verbose")["releases"]
    assert "env +FEATURE_X ~GREETING" in second["changed"]


def test_editing_the_spec_alone_is_no_change_of_the_source(slot: Slot) -> None:
    slot.deploy()
    slot.edit_spec('GREETING = "hello"', 'GREETING = "howdy"')
    r = slot.run("plan", "local")
    changes = [line for line in r.out.splitlines() if line.startswith("    app: ")]
    assert changes == ['    app: env GREETING "hello" → "howdy"'], r.out
    # a file of the app itself still is one
    (slot.app_dir / "app.py").write_text((slot.app_dir / "app.py").read_text() + "# edit\n")
    assert any(
        line.startswith("    app: source ") for line in slot.run("plan", "local").out.splitlines()
    )


def test_a_secret_change_is_named_and_its_value_appears_nowhere(slot: Slot) -> None:
    slot.spec.write_text(slot.spec.read_text() + SECRET_AND_FILES)
    with_token(slot, CANARY_OLD)
    first = slot.deploy()
    with_token(slot, CANARY_NEW)
    outputs = [first]
    plan = slot.run("plan", "local")
    outputs.append(plan)
    assert plan.code == 0, plan.text
    lines = plan.out.splitlines()
    assert "    app: env API_TOKEN (secret) changed" in lines
    assert not any("config/app.ini" in line for line in lines)  # its text did not change
    as_json = slot.run("plan", "local", "-o", "json")
    outputs.append(as_json)
    [change] = json.loads(as_json.out)["changes"]
    assert change == {"unit": "app", "field": "env.API_TOKEN", "kind": "changed", "old": None,
                      "new": None, "masked": True, "lines": []}  # fmt: skip
    outputs.append(slot.deploy())
    outputs += [
        slot.run("history", "local", "--verbose"),
        slot.run("history", "local", "--verbose", "-o", "json"),
        slot.run("diff", "local", "2"),
        slot.run("diff", "local", "1", "2", "-o", "json"),
        slot.run("status", "local", "-o", "json"),
    ]
    assert "env ~API_TOKEN" in outputs[-5].out
    for result in outputs:
        assert result.code == 0, result.text
        assert CANARY_OLD not in result.text and CANARY_NEW not in result.text
    stored = records_text(slot)
    assert CANARY_OLD not in stored and CANARY_NEW not in stored
    # what runs did get the new value: the secret-bearing file of the new snapshot has it
    ini = slot.state / "hello" / "local" / "releases" / "r2" / "config" / "app.ini"
    assert ini.read_text() == f"token={CANARY_NEW}\n"


def test_a_config_file_change_is_a_unified_diff_and_secret_files_are_only_named(
    slot: Slot,
) -> None:
    slot.spec.write_text(slot.spec.read_text() + SECRET_AND_FILES)
    with_token(slot, CANARY_OLD)
    slot.deploy()
    slot.edit_spec('"config/plain.txt" = "one\\ntwo\\nthree\\n"',
                   '"config/plain.txt" = "one\\n2\\nthree\\n"')  # fmt: skip
    slot.edit_spec('"token=${secrets.API_TOKEN}\\n"', '"token=${secrets.API_TOKEN}\\nretries=3\\n"')
    r = slot.run("plan", "local")
    assert r.code == 0, r.text
    lines = r.out.splitlines()
    at = lines.index("    file config/plain.txt: changed")
    assert lines[at + 1 : at + 6] == [
        "        @@ -1,3 +1,3 @@", "         one", "        -two", "        +2", "         three",
    ]  # fmt: skip
    assert "    file config/app.ini: secret-bearing, changed (not shown)" in lines
    assert "retries" not in r.out and CANARY_OLD not in r.text


def test_diff_between_two_revisions_after_their_snapshots_are_gone(slot: Slot) -> None:
    slot.deploy()
    slot.edit_spec('GREETING = "hello"', 'GREETING = "howdy"')
    slot.edit_spec("[processes.worker]\n", "[processes.worker]\nreplicas = 2\n")
    slot.deploy()
    (slot.app_dir / "app.py").write_text((slot.app_dir / "app.py").read_text() + "\n# edited\n")
    slot.deploy()
    assert slot.run("stop", "local").code == 0
    shutil.rmtree(slot.state / "hello" / "local" / "releases")  # every kept snapshot

    r = slot.run("diff", "local", "1", "2")
    assert r.code == 0, r.text
    lines = r.out.splitlines()
    assert lines[0] == "changes from r1 to r2:"
    assert '  app: env GREETING "hello" → "howdy"' in lines
    assert "  worker: replicas 1 → 2" in lines
    r = slot.run("diff", "local", "3")  # against its predecessor: the source only
    assert r.code == 0, r.text
    [head, source] = r.out.splitlines()
    assert head == "changes from r2 to r3:" and source.startswith("  app: source local:")
    doc = slot.json("diff", "local", "1", "3")
    assert {c["field"] for c in doc["changes"]} == {"source", "env.GREETING", "replicas"}
    assert (doc["before"], doc["after"], doc["no_changes"]) == (1, 3, False)

    rows = slot.json("history", "local", "--verbose")["releases"]
    assert [row["changed"].split(",")[0] for row in rows] == [
        "first release", rows[1]["changed"].split(",")[0], rows[2]["changed"]
    ]
    assert "env ~GREETING" in rows[1]["changed"] and "worker replicas 1→2" in rows[1]["changed"]
    assert rows[2]["changed"].startswith("source ")


def test_a_plain_value_equal_to_a_secrets_value_is_masked_in_plans_diffs_and_history(
    slot: Slot, tmp_path: Path
) -> None:
    slot.spec.write_text(slot.spec.read_text() + SECRET_AND_FILES)
    with_token(slot, CANARY_OLD)
    slot.deploy()
    # the same value as plain env, and inside a plain config file's line
    slot.edit_spec('GREETING = "hello"', f'GREETING = "hello"\nCOPY = "{CANARY_OLD}"')
    slot.edit_spec('"one\\ntwo\\nthree\\n"', f'"one\\ntoken {CANARY_OLD}\\nthree\\n"')
    saved = tmp_path / "saved.plan"
    outputs = [slot.run("plan", "local"), slot.run("plan", "local", "--out", str(saved))]
    # the plain value equal to the secret's is shown as that secret's placeholder
    assert '    app: env COPY added: "${secrets.API_TOKEN}"' in outputs[0].out.splitlines()
    assert "file config/plain.txt: secret-bearing, changed (not shown)" in outputs[0].out
    # what a plan says changed (its JSON's changes) shows no value
    as_json = slot.run("plan", "local", "-o", "json")
    assert CANARY_OLD not in json.dumps(json.loads(as_json.out)["changes"])
    # (a value inside a plain file's line is found only where the secret resolves: a plan;
    # the records know a secret's value only whole, by its mark)
    slot.edit_spec(f'"one\\ntoken {CANARY_OLD}\\nthree\\n"', '"one\\ntwo\\nthree\\n"')
    outputs[1] = slot.run("plan", "local", "--out", str(saved))
    outputs.append(slot.deploy("--plan", str(saved)))
    outputs += [
        slot.run("history", "local", "--verbose"),
        slot.run("history", "local", "--verbose", "-o", "json"),
        slot.run("diff", "local", "2"),
        slot.run("diff", "local", "1", "2", "-o", "json"),
    ]
    assert "COPY" in outputs[-2].out, outputs[-2].text
    for result in outputs:
        assert result.code == 0, result.text
        assert CANARY_OLD not in result.text, result.text
    # the plain value is the secret's placeholder in the plan, the saved plan and the
    # records; the process gets the value itself
    assert "${secrets.API_TOKEN}" in saved.read_text()
    assert CANARY_OLD not in saved.read_text() + records_text(slot)
    assert web_environ(slot)["COPY"] == CANARY_OLD
    again = slot.run("plan", "local")
    assert again.code == 0 and "no changes" in again.out.splitlines()[0], again.text
