"""Accessories on Kubernetes, on the test plane's real node: a Postgres accessory is a
StatefulSet with a claim, a ClusterIP Service and a Secret; the app gets a link to the
Service's ClusterIP; an app deploy leaves its pod alone; ``destroy`` keeps its claim and
Secret, ``--volumes`` deletes them. And a Django project from ``startproject`` on it:
migrated once by the release command's Job, serving its rows through its Service.

The test plane has no volume provisioner: each test gives the claim a hostPath
PersistentVolume of its own on the real node (this machine), bound to that claim alone, as
an administrator's static volume would be. The image is the test environment's
``postgres:15`` (``SHIPWAY_ACCESSORY_MIRROR``), pulled by the node from the test registry.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube.models.core_v1 import (
    HostPathVolumeSource,
    ObjectReference,
    PersistentVolumeSpec,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import PersistentVolume, PersistentVolumeClaim, Pod, Service
from lightkube.resources.core_v1 import Secret as SecretObject

from shipway import api
from shipway.engine.outcome import Rolled
from tests.testenv.docker import DockerEnv

from .conftest import Slot
from .test_real_pods import app_name, image

pytestmark = [pytest.mark.k8s, pytest.mark.real_node]

SSL_REQUEST = struct.pack("!ii", 8, 80877103)

WEB = """
[app]
name = "{name}"
image = "{image}"
image_type = "dockerfile"

[processes.web]
port = 8080
replicas = 1
healthcheck = {{ path = "/up", interval = "1s", timeout = "1s", attempts = 3 }}

[accessories.db]
kind = "postgres"
version = "15"
size = "1Gi"

[secrets]
DATABASE_URL = {{ from_accessory = "db" }}

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"
"""


@pytest.fixture
def mirror(monkeypatch: pytest.MonkeyPatch) -> str:
    prefix = os.environ.get("SHIPWAY_TEST_IMAGE_PREFIX")
    if not prefix:
        pytest.fail("SHIPWAY_TEST_IMAGE_PREFIX is not set: eval scripts/docker-testenv env")
    monkeypatch.setenv("SHIPWAY_ACCESSORY_MIRROR", prefix)
    return prefix


def static_volume(slot: Slot, claim: str, where: Path) -> Iterator[None]:
    """A hostPath PersistentVolume on the real node, bound to ``claim`` alone; deleted
    after the test (its directory is the test's own)."""
    name = f"{slot.namespace}-{claim}"[:63]
    pv = PersistentVolume(
        metadata=ObjectMeta(name=name),
        spec=PersistentVolumeSpec(
            capacity={"storage": "1Gi"},
            accessModes=["ReadWriteOnce"],
            hostPath=HostPathVolumeSource(path=str(where), type="DirectoryOrCreate"),
            claimRef=ObjectReference(namespace=slot.namespace, name=claim),
            persistentVolumeReclaimPolicy="Retain",
        ),
    )
    slot.client.create(pv)
    try:
        yield
    finally:
        slot.client.delete(PersistentVolume, name)


@pytest.fixture
def db_volume(real_slot: Slot, tmp_path: Path) -> Iterator[None]:
    claim = f"data-{app_name(real_slot)}-acc-db-0"
    yield from static_volume(real_slot, claim, tmp_path / "pv")


def ssl_answer(address: str, port: int) -> bytes:
    """Postgres' answer to an SSLRequest at the ClusterIP, once kube-proxy has its rules."""
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection((address, port), timeout=3) as sock:
                sock.sendall(SSL_REQUEST)
                return sock.recv(1)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_a_postgres_accessory_is_a_statefulset_with_a_claim_behind_a_cluster_ip(
    real_slot: Slot, db_volume: None, mirror: str
) -> None:
    name = app_name(real_slot)
    app = real_slot.write(WEB, name=name, image=image("v1"))
    outcome, lines = real_slot.deploy(app, timeout=300)
    assert isinstance(outcome, Rolled), lines.text
    assert "accessory db (postgres 15) is ready" in lines.text
    client, ns = real_slot.client, real_slot.namespace
    sts = client.get(StatefulSet, f"{name}-acc-db", namespace=ns)
    assert sts.spec.volumeClaimTemplates[0].spec.resources.requests == {"storage": "1Gi"}
    claim = client.get(PersistentVolumeClaim, f"data-{name}-acc-db-0", namespace=ns)
    assert claim.status.phase == "Bound"
    service = client.get(Service, f"{name}-acc-db", namespace=ns)
    assert service.spec.type == "ClusterIP" and not service.spec.externalIPs
    secret = client.get(SecretObject, f"{name}-acc-db", namespace=ns)
    password = base64.b64decode(secret.data["password"]).decode()
    assert ssl_answer(service.spec.clusterIP, 5432) == b"N"
    pod = client.get(Pod, f"{name}-acc-db-0", namespace=ns)
    assert pod.spec.nodeName == real_slot.real_node
    assert pod.spec.containers[0].image == f"{mirror}/postgres:15"

    # the app's deploy (forced: new pods) leaves the accessory's pod alone
    outcome, lines = real_slot.deploy(real_slot.app(), force=True, timeout=300)
    assert isinstance(outcome, Rolled), lines.text
    again = client.get(Pod, f"{name}-acc-db-0", namespace=ns)
    assert again.metadata.uid == pod.metadata.uid
    [shown] = api.status(real_slot.app(), "test1").accessories
    assert (shown.kind, shown.state, shown.healthy) == ("postgres", "running", True)
    assert shown.address == f"{service.spec.clusterIP}:5432"
    assert password not in lines.text

    # destroy keeps the claim and the Secret (the data and its password); --volumes not
    api.destroy(real_slot.app(), "test1", confirm="test1")
    assert client.get(PersistentVolumeClaim, f"data-{name}-acc-db-0", namespace=ns)
    assert client.get(SecretObject, f"{name}-acc-db", namespace=ns).data == secret.data
    assert not list(client.list(StatefulSet, namespace=ns))
    api.destroy(real_slot.app(), "test1", volumes=True, confirm="test1")
    assert not list(client.list(SecretObject, namespace=ns, labels={"shipway.io/accessory": "db"}))


DJANGO = """
[app]
name = "{name}"
image = "{image}"
release_command = "python manage.py migrate --noinput"

[build]
host = "{docker}"
args = {{ PYTHON_IMAGE = "{python}", PIP_FIND_LINKS = "{wheels}", PIP_NO_INDEX = "1", \
PIP_TRUSTED_HOST = "{wheels_host}" }}

[processes.web]
command = "gunicorn --bind 0.0.0.0:$PORT --workers 2 mysite.wsgi"
port = 8000
replicas = 1
healthcheck = {{ path = "/count/", interval = "1s", timeout = "2s", attempts = 5 }}

[env]
DJANGO_SETTINGS_MODULE = "mysite.settings"

[accessories.db]
kind = "postgres"
version = "15"

[secrets]
DATABASE_URL = {{ from_accessory = "db" }}

[slots.test1]
backend = "kubernetes"
namespace = "{namespace}"
"""


@pytest.mark.timeout(900)  # a build (pip from the wheelhouse), pods pulling its image
def test_django_on_a_postgres_accessory_migrates_once_and_serves_its_rows(
    real_slot: Slot, db_volume: None, mirror: str, tmp_path: Path, docker_env: DockerEnv
) -> None:
    from tests.backends.docker.test_build import bridge_address
    from tests.backends.docker.test_django_postgres import DOCKERFILE
    from tests.backends.local.test_django_postgres import ADD_USER, make_project
    from tests.testenv.wheelhouse import Wheelhouse

    env = docker_env
    (tmp_path / "project").mkdir()
    app_dir, wheels = make_project(tmp_path / "project")
    settings = app_dir / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + '\nALLOWED_HOSTS = ["*"]\n')
    (app_dir / "Dockerfile").write_text(DOCKERFILE)
    house = Wheelhouse(wheels)
    url = house.serve(bridge_address(env))
    name = app_name(real_slot)
    try:
        real_slot.directory = app_dir
        app = real_slot.write(
            DJANGO,
            name=name,
            image=f"{env.image_prefix}/{name}",
            docker=env.a.url,
            python=env.images.python,
            wheels=url,
            wheels_host=url.split("//", 1)[1].split(":", 1)[0],
        )
        outcome, lines = real_slot.deploy(app, build=True, timeout=600)
        assert isinstance(outcome, Rolled), lines.text
        assert "accessory db (postgres 15) is ready" in lines.text
        # the release command ran once, as a Job, before the web pod; the web pod, which
        # never migrates, finds the tables in the accessory's database
        assert lines.text.count("] run the release command") == 1, lines.text
        service = real_slot.client.get(Service, f"{name}-web", namespace=real_slot.namespace)
        base = f"http://{service.spec.clusterIP}:{service.spec.ports[0].port}"
        assert count(base) == "users: 0"
        code = api.run(real_slot.app(), "test1", ["python", "manage.py", "shell", "-c", ADD_USER])
        assert code == 0
        assert count(base) == "users: 1"
    finally:
        house.close()
        env.untag(name)


def count(base: str) -> str:
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"{base}/count/", timeout=5) as answer:
                return str(answer.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
