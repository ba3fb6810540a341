"""What a plan says changed, on the two test hosts, through the real CLI: an unchanged slot
plans "no changes" and a deploy makes no revision (no container is replaced); an env change
shows old → new and the per-host detail; a secret change is named and its value appears in
no output, JSON or record; a config file change is a unified diff; ``diff`` between two
revisions reads the records alone, after their images are gone from both hosts."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

from shipway import api
from shipway.release import codec
from tests import cliproc
from tests.backends.docker.conftest import SLOT, Deployment

CANARY_OLD = "tok-canary-docker-old-0b3e"
CANARY_NEW = "tok-canary-docker-new-7a1c"
FILES = """
[env]
LOG_LEVEL = "info"

[secrets]
TOKEN = { from_env = "CHANGES_TOKEN" }

[files]
"config/plain.txt" = "one\\ntwo\\nthree\\n"
"config/app.ini" = "token=${secrets.TOKEN}\\n"
"""


def cli(deployment: Deployment, *args: str, token: str = CANARY_OLD) -> Any:
    result = cliproc.run(
        [sys.executable, "-m", "shipway", "-f", str(deployment.spec_file), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "CHANGES_TOKEN": token},
        timeout=240,
        check=False,
    )
    result.text = result.stdout + result.stderr
    return result


def ok(result: Any) -> Any:
    assert result.returncode == 0, result.text
    return result


def container_ids(deployment: Deployment) -> set[str]:
    return {c.id for host in deployment.hosts for c in deployment.containers(host)}


@pytest.fixture
def two_hosts(deployment: Deployment) -> Deployment:
    deployment.write(extra=FILES)
    ok(cli(deployment, "deploy", SLOT))
    return deployment


def test_an_unchanged_slot_plans_no_changes_and_deploy_makes_no_revision(
    two_hosts: Deployment,
) -> None:
    before = container_ids(two_hosts)
    plan = ok(cli(two_hosts, "plan", SLOT, "--detailed-exitcode"))
    assert plan.stdout.splitlines()[0].endswith(f"to slot {SLOT} (docker): no changes")
    deploy = ok(cli(two_hosts, "deploy", SLOT))
    assert "no changes" in deploy.stdout and "no revision recorded" in deploy.stdout
    assert [r.revision for r in api.history(two_hosts.app(), SLOT)] == [1]
    assert container_ids(two_hosts) == before
    assert "no changes" in ok(cli(two_hosts, "repair", SLOT)).stdout


def test_an_env_change_shows_old_and_new_and_each_host(two_hosts: Deployment) -> None:
    text = two_hosts.spec_file.read_text().replace('LOG_LEVEL = "info"', 'LOG_LEVEL = "debug"')
    two_hosts.spec_file.write_text(text)
    plan = cli(two_hosts, "plan", SLOT, "--detailed-exitcode")
    assert plan.returncode == 6, plan.text
    lines = plan.stdout.splitlines()
    assert '    app: env LOG_LEVEL "info" → "debug"' in lines
    assert "per host:" in lines
    for host in two_hosts.hosts:
        assert any(line.startswith("  ") and f" ({host.url}): " in line for line in lines), lines
    doc = json.loads(ok(cli(two_hosts, "deploy", SLOT, "--dry-run", "-o", "json")).stdout)
    assert [(c["field"], c["old"], c["new"]) for c in doc["changes"]] == [
        ("env.LOG_LEVEL", "info", "debug")
    ]


def test_a_secret_change_is_named_and_its_value_appears_nowhere(two_hosts: Deployment) -> None:
    outputs = [ok(cli(two_hosts, "plan", SLOT, token=CANARY_NEW))]
    assert "    app: env TOKEN (secret) changed" in outputs[0].stdout.splitlines()
    outputs.append(ok(cli(two_hosts, "plan", SLOT, "-o", "json", token=CANARY_NEW)))
    [change] = json.loads(outputs[-1].stdout)["changes"]
    assert (change["field"], change["masked"], change["old"], change["new"]) == (
        "env.TOKEN", True, None, None,
    )  # fmt: skip
    outputs.append(ok(cli(two_hosts, "deploy", SLOT, token=CANARY_NEW)))
    outputs += [
        ok(cli(two_hosts, "history", SLOT, "--verbose", "-o", "json", token=CANARY_NEW)),
        ok(cli(two_hosts, "diff", SLOT, "2", token=CANARY_NEW)),
        ok(cli(two_hosts, "diff", SLOT, "1", "2", "-o", "json", token=CANARY_NEW)),
    ]
    assert "  app: env TOKEN (secret) changed" in outputs[-2].stdout.splitlines()
    for result in outputs:
        assert CANARY_OLD not in result.text and CANARY_NEW not in result.text
    records = api.history(two_hosts.app(), SLOT)
    stored = b"".join(codec.encode(r) for r in records)  # exactly what the hosts keep
    stored += json.dumps([codec.to_json(r) for r in records]).encode()
    assert CANARY_OLD.encode() not in stored and CANARY_NEW.encode() not in stored


def test_a_config_file_change_is_a_unified_diff(two_hosts: Deployment) -> None:
    spec = two_hosts.spec_file
    spec.write_text(spec.read_text().replace('"one\\ntwo\\nthree\\n"', '"one\\n2\\nthree\\n"'))
    lines = ok(cli(two_hosts, "plan", SLOT)).stdout.splitlines()
    at = lines.index("    file config/plain.txt: changed")
    assert lines[at + 1 : at + 5] == [
        "        @@ -1,3 +1,3 @@", "         one", "        -two", "        +2",
    ]  # fmt: skip
    assert "    file config/app.ini: secret-bearing, changed (not shown)" not in lines


def test_diff_between_two_revisions_after_their_images_are_gone(deployment: Deployment) -> None:
    env = deployment.env
    tags = {v: f"{env.image_prefix}/{deployment.name}:{v}" for v in ("v1", "v2")}
    for host in env.hosts:
        client = deployment.local(host)
        try:
            for version, tag in tags.items():  # a tag of this test's own, on each host
                client.images.pull(getattr(env.images, version)).tag(tag)
        finally:
            client.close()
    deployment.write(image=tags["v1"])
    ok(cli(deployment, "deploy", SLOT))
    ok(cli(deployment, "deploy", SLOT, "--image", tags["v2"]))
    for host in env.hosts:  # the images these two releases ran are gone from both hosts
        client = deployment.local(host)
        try:
            for tag in tags.values():
                client.images.remove(tag)
        finally:
            client.close()
    lines = ok(cli(deployment, "diff", SLOT, "1", "2")).stdout.splitlines()
    assert lines[0] == "changes from r1 to r2:"
    assert lines[1].startswith(f"  app: image {tags['v1']}") and f"→ {tags['v2']}" in lines[1]
    rows = json.loads(ok(cli(deployment, "history", SLOT, "-v", "-o", "json")).stdout)["releases"]
    assert [row["changed"] for row in rows] == ["first release", f"image {tags['v1']}→{tags['v2']}"]
