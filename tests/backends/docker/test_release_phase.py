"""The release phase, one-off commands and data a deploy would lose, on the Docker test
hosts. The order of what happened is read from each engine's own event stream (its audit
log): the release command's container has exited before the release's first app container
is created, and a failing one is followed by no app container at all."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from shipway.engine import Rolled, RolledBack
from tests import cliproc
from tests.backends.docker.conftest import Deployment, Lines, ssh_environ
from tests.testenv.docker import DockerHost

MIGRATE = '[app]\nrelease_command = ["sh", "-c", "echo migrating; $MIGRATE"]\n'
TOKEN = "tok-3b9f1c-do-not-print"


def with_release_command(d: Deployment, migrate: str = "true", **kw: Any) -> None:
    d.write(extra=f'[env]\nMARKER = "m-1"\nMIGRATE = "{migrate}"\n', **kw)
    text = d.spec_file.read_text().replace("[app]\n", MIGRATE, 1)
    d.spec_file.write_text(text)


def events(d: Deployment, host: DockerHost, since: float) -> list[dict[str, Any]]:
    """The app's container events on ``host`` since ``since``, oldest first. The engine
    takes whole seconds; the events are cut at ``since`` itself, so a deploy that ended a
    moment before (its creates within the same second) is not counted."""
    client = d.local(host)
    try:
        found = client.events(
            since=int(since),
            until=int(time.time()) + 1,
            decode=True,
            filters={"type": "container", "label": [f"org.shipway.app={d.name}"]},
        )
        after = [e for e in found if int(e["timeNano"]) >= since * 1e9]
        return sorted(after, key=lambda e: int(e["timeNano"]))
    finally:
        client.close()


def kind(e: dict[str, Any]) -> str:
    return str(e["Actor"]["Attributes"].get("org.shipway.kind"))


def test_the_release_command_exits_before_the_first_new_container_is_created(
    deployment: Deployment,
) -> None:
    env = deployment.env
    with_release_command(deployment)
    since = time.time()
    lines = Lines()
    outcome = deployment.deploy(lines)
    assert isinstance(outcome, Rolled), lines.text()
    done = [e for e in events(deployment, env.a, since) if kind(e) == "release-command"]
    assert [e["Action"] for e in done][:1] == ["create"]
    exited = next(int(e["timeNano"]) for e in done if e["Action"] == "die")
    for host in (env.a, env.b):
        created = [
            int(e["timeNano"])
            for e in events(deployment, host, since)
            if kind(e) == "app" and e["Action"] == "create"
        ]
        assert created and exited < min(created), host.url
    text = lines.text()
    assert text.index("run the release command") < text.index("create container/web.1/")


def test_a_failing_release_command_starts_no_new_container(deployment: Deployment) -> None:
    env = deployment.env
    with_release_command(deployment)
    assert isinstance(deployment.deploy(), Rolled)
    hosts = (env.a, env.b)
    running = {h.url: {c.name for c in deployment.containers(h, kind="app")} for h in hosts}
    text = deployment.spec_file.read_text().replace('MIGRATE = "true"', 'MIGRATE = "exit 5"')
    deployment.spec_file.write_text(text.replace("m-1", "m-2"))
    since = time.time()
    lines = Lines()
    outcome = deployment.deploy(lines)
    assert isinstance(outcome, RolledBack), lines.text()
    assert outcome.failure.reason == "ReleaseCommandFailed" and outcome.failure.exit_code == 5
    assert "migrating" in "\n".join(outcome.failure.details)  # the command's log excerpt
    for host in (env.a, env.b):
        created = [e for e in events(deployment, host, since) if e["Action"] == "create"]
        assert [e for e in created if kind(e) in ("app", "proxy")] == []  # nothing new ran
        assert {c.name for c in deployment.containers(host, kind="app")} == running[host.url]
        assert "MARKER=m-1" in deployment.get(host, "/cgi-bin/env")[1]
    assert deployment.containers(env.a, kind="release-command") == []


# -- one-off commands ---------------------------------------------------------------------


def shipway(
    d: Deployment, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return cliproc.run(
        [sys.executable, "-m", "shipway", "-f", str(d.spec_file), *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, **ssh_environ(d.env), "SHIPWAY_TEST_TOKEN": TOKEN},
        timeout=120,
        check=False,
    )


SECRET = '[secrets]\nAPI_TOKEN = { from_env = "SHIPWAY_TEST_TOKEN" }\n'


# -- data a deploy would lose; files holding secrets ---------------------------------------


def test_a_config_file_holding_a_secret_is_0600_in_its_volume(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = deployment.env
    files = '[files]\n"config/db.ini" = "token=${secrets.API_TOKEN}\\n"\n"config/plain.ini" = "x"\n'
    deployment.write(hosts=[env.a], extra=SECRET + files)
    monkeypatch.setenv("SHIPWAY_TEST_TOKEN", TOKEN)
    assert isinstance(deployment.deploy(), Rolled)
    client = deployment.local(env.a)
    try:
        [volume] = client.volumes.list(
            filters={"label": [f"org.shipway.app={deployment.name}", "org.shipway.kind=files"]}
        )
        root = Path(volume.attrs["Mountpoint"])
    finally:
        client.close()
    secret_file, plain = root / "config" / "db.ini", root / "config" / "plain.ini"
    assert secret_file.read_text() == f"token={TOKEN}\n"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(plain.stat().st_mode) == 0o644
