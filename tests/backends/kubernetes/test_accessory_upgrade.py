"""A Postgres accessory's major-version upgrade on Kubernetes, on the test plane's real
node, through the real CLI: refused without ``--upgrade-accessory`` (exit 2, naming the
flag, its pod as it was); done with it as a dump and restore from a real 15 into a real
16.2 (the rows there after, the server saying 16, the claim holding the new cluster and the
dump only); and an upgrade to a "16" that is a 15 in disguise failing after its pod was
ready, leaving the old server serving its old rows from its old cluster.

Images: tests/testenv/pg_images.py (Debian bookworm has no second major; the 16 is the
pgserver wheel's, built into an image FROM the test ``postgres:15``). The claim is a
hostPath PersistentVolume on the real node (this machine), as in test_accessories.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import Pod

from tests.testenv.pg_images import postgres_images

from .conftest import Slot
from .test_accessories import WEB, static_volume
from .test_backups import PSQL, sh
from .test_real_pods import app_name, image

pytestmark = [pytest.mark.k8s, pytest.mark.real_node, pytest.mark.timeout(600)]


@pytest.fixture
def claim_dir(real_slot: Slot, tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "pv"
    for _ in static_volume(real_slot, f"data-{app_name(real_slot)}-acc-db-0", where):
        yield where


def with_rows(s: Slot, mirror: str) -> tuple[str, dict[str, str]]:
    """The slot deployed with postgres 15 from ``mirror``, a table of two rows in it, and
    the spec then asking for 16; the accessory's pod and the CLI's environment."""
    env = {"SHIPWAY_ACCESSORY_MIRROR": mirror}
    name = app_name(s)
    s.write(WEB, name=name, image=image("v1"))
    r = s.cli("deploy", "test1", env=env, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    pod = f"{name}-acc-db-0"
    sh(s, pod, "postgres", PSQL + "'create table notes (id serial primary key, text text)'")
    sh(s, pod, "postgres", PSQL + "\"insert into notes (text) values ('one'), ('two')\"")
    assert sh(s, pod, "postgres", PSQL + "'show server_version'").startswith("15.")
    s.write(WEB.replace('version = "15"', 'version = "16"'), name=name, image=image("v1"))
    return pod, env


def rows(s: Slot, pod: str) -> str:
    return sh(s, pod, "postgres", PSQL + "'select text from notes order by id'")


def refused_unasked(s: Slot, pod: str, env: dict[str, str]) -> None:
    """``plan`` and ``deploy`` without ``--upgrade-accessory`` refused (exit 2, naming the
    key and the flag), the accessory's pod the very same."""
    before = s.client.get(Pod, pod, namespace=s.namespace)
    for verb in ("plan", "deploy"):
        r = s.cli(verb, "test1", env=env)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "accessories.db.version" in r.stderr and "--upgrade-accessory db" in r.stderr
    assert s.client.get(Pod, pod, namespace=s.namespace).metadata.uid == before.metadata.uid


def test_upgrade_refused_then_done(
    real_slot: Slot, claim_dir: Path
) -> None:
    s = real_slot
    pod, env = with_rows(s, postgres_images()[0])
    refused_unasked(s, pod, env)
    r = s.cli("plan", "test1", "--upgrade-accessory", "db", env=env)
    assert r.returncode == 0, r.stderr
    assert "upgrade accessory db (postgres 16): 15 -> 16, asked by --upgrade-accessory db" in (
        r.stdout
    )
    r = s.cli("deploy", "test1", "--upgrade-accessory", "db", env=env, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pg_dump 15." in r.stdout and "postgres 16 answers with the data restored" in r.stdout
    assert sh(s, pod, "postgres", PSQL + "'show server_version'") == "16.2"
    assert rows(s, pod) == "one\ntwo"
    assert sorted(os.listdir(claim_dir)) == ["pg16", "shipway-upgrade-15-to-16.dump"]
    sts = s.client.get(StatefulSet, pod.removesuffix("-0"), namespace=s.namespace)
    [container] = sts.spec.template.spec.containers
    assert container.image.endswith("/postgres:16")
    # the next deploy has nothing to do for it: its cluster's directory is kept
    r = s.cli("deploy", "test1", env=env)
    assert r.returncode == 0 and "accessory" not in r.stdout.split("(made from")[0], r.stdout
    assert rows(s, pod) == "one\ntwo"
    # destroyed (its StatefulSet gone, its claim and Secret kept) and deployed again: made
    # anew on the cluster the upgrade left in pg16/ (kept on the Secret), not an empty one
    r = s.cli("destroy", "test1", "--confirm", "test1", env=env)
    assert r.returncode == 0, r.stderr
    r = s.cli("deploy", "test1", env=env, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sh(s, pod, "postgres", PSQL + "'show server_version'") == "16.2"
    assert rows(s, pod) == "one\ntwo"
    assert sorted(os.listdir(claim_dir)) == ["pg16", "shipway-upgrade-15-to-16.dump"]


def test_failed_upgrade_keeps_old(
    real_slot: Slot, claim_dir: Path
) -> None:
    s = real_slot
    pod, env = with_rows(s, postgres_images()[1])  # its "16" is a 15
    r = s.cli("deploy", "test1", "--upgrade-accessory", "db", env=env, timeout=400)
    assert r.returncode != 0, r.stdout + r.stderr
    text = r.stdout + r.stderr
    assert "the upgrade of accessory db to postgres 16 failed" in text, text
    assert "the new server is postgres 15." in text and "postgres 15 runs again" in text, text
    assert sh(s, pod, "postgres", PSQL + "'show server_version'").startswith("15.")
    assert rows(s, pod) == "one\ntwo"
    listed = sorted(os.listdir(claim_dir))
    assert listed == ["pgdata", "shipway-upgrade-15-to-16.dump"], listed
    sts = s.client.get(StatefulSet, pod.removesuffix("-0"), namespace=s.namespace)
    [container] = sts.spec.template.spec.containers
    assert container.image.endswith("/postgres:15")
    assert {e.name: e.value for e in container.env}["PGDATA"].endswith("/pgdata")
