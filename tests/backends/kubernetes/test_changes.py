"""What a plan says changed, on the test control plane, through the real CLI: an unchanged
slot plans "no changes" and a deploy makes no revision; env, secrets and config files show
as they should (a secret named, its value in no output, JSON or record); an object changed
out of band shows in the object diff and is put back; ``diff`` between two revisions reads
the records alone (these images never existed in any registry)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Secret

from shipway.release import codec
from tests.backends.kubernetes.conftest import TOKEN, Slot

pytestmark = pytest.mark.k8s

CANARY = "tok-canary-k8s-4d9e1b7a-never-shown"
FILES = """
[files]
"config/plain.txt" = "one\\ntwo\\nthree\\n"
"config/app.ini" = "token=${secrets.TOKEN}\\n"
"""


def versions(slot: Slot) -> dict[str, Any]:
    out = {}
    for res in (Deployment, Secret):
        for obj in slot.client.list(res, namespace=slot.namespace):
            out[f"{res.__name__}/{obj.metadata.name}"] = obj.metadata.resourceVersion
    return out


def ok(result: Any) -> Any:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_an_unchanged_slot_plans_no_changes_and_deploy_makes_no_revision(slot: Slot) -> None:
    app = slot.write()
    ok(slot.cli("deploy", "test1"))
    before = versions(slot)
    plan = ok(slot.cli("plan", "test1", "--detailed-exitcode"))
    assert plan.stdout.splitlines()[0] == "deploy shop to slot test1 (kubernetes): no changes"
    deploy = ok(slot.cli("deploy", "test1"))
    assert "no changes: shop/test1 already runs what this deploy would run (r1)" in deploy.stdout
    assert sorted(slot.records(app)) == [1]
    assert versions(slot) == before  # nothing applied: no object was written
    forced = ok(slot.cli("deploy", "test1", "--force"))
    assert "rolled shop/test1 from r1 to r2" in forced.stdout


def test_an_env_change_shows_old_and_new_and_exits_6(slot: Slot) -> None:
    slot.write()
    ok(slot.cli("deploy", "test1"))
    slot.edit('LOG_LEVEL = "info"', 'LOG_LEVEL = "debug"')
    plan = slot.cli("plan", "test1", "--detailed-exitcode")
    assert plan.returncode == 6, plan.stdout + plan.stderr
    assert '    app: env LOG_LEVEL "info" → "debug"' in plan.stdout.splitlines()
    doc = json.loads(ok(slot.cli("deploy", "test1", "--dry-run", "-o", "json")).stdout)
    assert [c["field"] for c in doc["changes"]] == ["env.LOG_LEVEL"]
    assert (doc["changes"][0]["old"], doc["changes"][0]["new"]) == ("info", "debug")


def test_a_secret_change_is_named_and_its_value_appears_nowhere(slot: Slot) -> None:
    app = slot.write()
    slot.append(FILES)
    ok(slot.cli("deploy", "test1"))
    new = {"SHOP_TOKEN": CANARY}
    outputs = [
        ok(slot.cli("plan", "test1", env=new)),
        ok(slot.cli("plan", "test1", "-o", "json", env=new)),
    ]
    assert "    app: env TOKEN (secret) changed" in outputs[0].stdout.splitlines()
    masked = [c for c in json.loads(outputs[1].stdout)["changes"] if c["masked"]]
    assert masked == [{"unit": "app", "field": "env.TOKEN", "kind": "changed", "old": None,
                       "new": None, "masked": True, "lines": []}]  # fmt: skip
    outputs.append(ok(slot.cli("deploy", "test1", env=new)))
    outputs += [
        ok(slot.cli("history", "test1", "--verbose", "-o", "json", env=new)),
        ok(slot.cli("diff", "test1", "2", env=new)),
        ok(slot.cli("diff", "test1", "1", "2", "-o", "json", env=new)),
    ]
    assert "env ~TOKEN" in json.loads(outputs[3].stdout)["releases"][1]["changed"]
    for result in outputs:
        text = result.stdout + result.stderr
        assert CANARY not in text and TOKEN not in text
    stored = json.dumps([codec.to_json(r) for r in slot.records(app).values()])
    assert CANARY not in stored and TOKEN not in stored
    # what runs did get it: the env Secret holds the new value
    env = slot.secret("shop-env")
    assert CANARY.encode() in b"".join(base64.b64decode(v) for v in env.data.values())


def test_a_config_file_change_is_a_unified_diff(slot: Slot) -> None:
    slot.write()
    slot.append(FILES)
    ok(slot.cli("deploy", "test1"))
    slot.edit('"one\\ntwo\\nthree\\n"', '"one\\n2\\nthree\\n"')
    lines = ok(slot.cli("plan", "test1")).stdout.splitlines()
    at = lines.index("    file config/plain.txt: changed")
    assert lines[at + 1 : at + 5] == [
        "        @@ -1,3 +1,3 @@", "         one", "        -two", "        +2",
    ]  # fmt: skip
    assert not any("config/app.ini" in line for line in lines[:at])


def test_an_object_changed_out_of_band_shows_in_the_object_diff_and_is_put_back(
    slot: Slot,
) -> None:
    app = slot.write()
    ok(slot.cli("deploy", "test1"))
    slot.client.patch(
        Deployment, "shop-web", {"spec": {"replicas": 5}}, namespace=slot.namespace,
        field_manager="kubectl-scale",
    )  # fmt: skip
    repair = slot.cli("plan", "test1", "--repair", "--detailed-exitcode")
    assert repair.returncode == 6, repair.stdout + repair.stderr
    assert "  1. update Deployment/shop-web" in repair.stdout.splitlines()
    plan = slot.cli("plan", "test1", "--detailed-exitcode")
    assert plan.returncode == 6, plan.stdout + plan.stderr
    lines = plan.stdout.splitlines()
    assert "    Deployment/shop-web: drifted: changed in the target since it was applied" in lines
    assert "~ Deployment/shop-web" in lines
    assert any(line.strip() == "-  replicas: 5" for line in lines), plan.stdout
    assert any(line.strip() == "+  replicas: 2" for line in lines), plan.stdout
    doc = json.loads(ok(slot.cli("plan", "test1", "-o", "json")).stdout)
    assert {"unit": "Deployment/shop-web", "field": "live", "kind": "drifted", "old": "altered",
            "new": None, "masked": False, "lines": []} in doc["changes"]  # fmt: skip
    ok(slot.cli("deploy", "test1"))
    assert slot.deployment("shop-web").spec.replicas == 2
    assert sorted(slot.records(app)) == [1, 2]
    assert "no changes" in ok(slot.cli("plan", "test1", "--detailed-exitcode")).stdout


def test_diff_between_two_revisions_from_the_records_alone(slot: Slot) -> None:
    slot.write()
    ok(slot.cli("deploy", "test1"))
    slot.edit("replicas = 2", "replicas = 3")
    ok(slot.cli("deploy", "test1", "--image", "registry.example/shop:2"))
    lines = ok(slot.cli("diff", "test1", "1", "2")).stdout.splitlines()
    assert lines == [
        "changes from r1 to r2:",
        "  app: image registry.example/shop:1 → registry.example/shop:2",
        "  web: replicas 2 → 3",
    ]
    rows = json.loads(ok(slot.cli("history", "test1", "-v", "-o", "json")).stdout)["releases"]
    assert [r["changed"] for r in rows] == [
        "first release", "image registry.example/shop:1→registry.example/shop:2, web replicas 2→3",
    ]  # fmt: skip
