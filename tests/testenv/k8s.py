"""pytest plugin: the real Kubernetes test control plane (``scripts/k8s-testenv``).

Load it from ``tests/conftest.py`` with ``pytest_plugins = ["tests.testenv.k8s"]``.

Fixtures:

* ``k8s_kubeconfig`` (session) -> ``Path`` of an admin kubeconfig. Uses
  ``$SHIPWAY_TEST_KUBECONFIG`` when set (any cluster), else runs
  ``scripts/k8s-testenv up`` once.
* ``k8s_client`` (session) -> ``lightkube.Client`` for it.
* ``k8s_audit_log`` (session) -> ``Path`` of the API server's audit log
  (``$SHIPWAY_TEST_AUDIT_LOG``); skips when there is none.
* ``k8s_namespace`` (function) -> name of a fresh namespace whose ``default``
  ServiceAccount exists; deleted afterwards (without waiting).
* ``k8s_namespaces`` (function) -> ``make() -> name``: more fresh namespaces.
* ``mint_kubeconfig`` (function) -> ``(namespace, rules=None) -> Path``: a kubeconfig
  for a new ServiceAccount bound to a namespace-scoped Role.
* ``helm`` (function) -> :class:`HelmPeer`: install / upgrade / roll back releases of
  the charts under ``tests/charts`` with helm-python-sdk.

Helpers for tests: :func:`wait_for` and :func:`wait_for_all` wait on watches, with a
timeout, until a condition holds; :func:`audit_events` reads the audit events written from
a point on, across the API server's rotation of its log. Pods take their behaviour from
the image tag or the ``shipway.test/behaviour`` annotation (see ``scripts/k8s-testenv``).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import os
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.authorization_v1 import SubjectAccessReview
from lightkube.resources.core_v1 import Namespace, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTENV_SCRIPT = REPO_ROOT / "scripts" / "k8s-testenv"
CHARTS_DIR = REPO_ROOT / "tests" / "charts"
KUBECONFIG_ENV = "SHIPWAY_TEST_KUBECONFIG"
AUDIT_LOG_ENV = "SHIPWAY_TEST_AUDIT_LOG"
FIELD_MANAGER = "shipway-tests"

BEHAVIOUR_ANNOTATION = "shipway.test/behaviour"
READY_AFTER_ANNOTATION = "shipway.test/ready-after"

T = TypeVar("T")
R = TypeVar("R")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "k8s: needs the Kubernetes test control plane (scripts/k8s-testenv)"
    )


# --------------------------------------------------------------------------- waiting


class WaitTimeout(AssertionError):
    """A condition did not hold in time; the message has the last state seen."""


def wait_for_all(
    client: Client,
    res: type[T],
    check: Callable[[dict[str, T]], R | None],
    *,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    fields: Mapping[str, str] | None = None,
    timeout: float = 60,
    what: str = "condition",
) -> R:
    """Watch ``res`` objects (by name) until ``check(objects)`` returns a value that is not
    None/False, and return it. ``objects`` holds every matching object as last seen.
    Raises :class:`WaitTimeout` after ``timeout`` seconds."""

    async def run() -> R:
        seen: dict[str, T] = {}
        async with AsyncClient(config=client.config, field_manager=FIELD_MANAGER) as aclient:
            kwargs: dict[str, Any] = {"labels": labels, "fields": fields}
            if namespace is not None:
                kwargs["namespace"] = namespace
            # lightkube's overloads cannot take a TypeVar resource: call through Any.
            list_: Any = aclient.list
            watch: Any = aclient.watch
            try:
                async with asyncio.timeout(timeout):
                    # List first (so a condition that already holds, or an object that is
                    # already gone, is seen), then watch from the list's resourceVersion.
                    listing = list_(res, **kwargs)
                    async for obj in listing:
                        seen[obj.metadata.name] = obj
                    result = check(seen)
                    if result is not None and result is not False:
                        return result
                    async for event, obj in watch(
                        res, resource_version=listing.resourceVersion, **kwargs
                    ):
                        name = obj.metadata.name
                        if event == "DELETED":
                            seen.pop(name, None)
                        else:
                            seen[name] = obj
                        result = check(seen)
                        if result is not None and result is not False:
                            return result
            except TimeoutError:
                pass
        last = {name: _brief(obj) for name, obj in seen.items()}
        raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}; last seen: {last}")

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    # Called from async code (an async test): wait in a thread with its own loop.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run()).result()


def wait_for(
    client: Client,
    res: type[T],
    name: str,
    check: Callable[[T], bool],
    *,
    namespace: str | None = None,
    timeout: float = 60,
    what: str | None = None,
) -> T:
    """Watch one object until ``check(obj)`` is true; return that object."""

    def one(objects: dict[str, T]) -> T | None:
        obj = objects.get(name)
        return obj if obj is not None and check(obj) else None

    return wait_for_all(
        client,
        res,
        one,
        namespace=namespace,
        fields={"metadata.name": name},
        timeout=timeout,
        what=what or f"{getattr(res, '__name__', res)} {name}",
    )


def _brief(obj: Any) -> Any:
    status = getattr(obj, "status", None)
    if status is None:
        return None
    try:
        return status.to_dict()
    except AttributeError:
        return status


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def k8s_kubeconfig() -> Path:
    """The admin kubeconfig of the test cluster (started once if need be)."""
    configured = os.environ.get(KUBECONFIG_ENV)
    if configured:
        path = Path(configured)
        if not path.is_file():
            pytest.fail(f"${KUBECONFIG_ENV}={configured} is not a file")
        return path
    result = subprocess.run(
        [str(TESTENV_SCRIPT), "up"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        pytest.fail(
            f"{TESTENV_SCRIPT} up failed (exit {result.returncode}):\n"
            f"{result.stdout}\n{result.stderr}"
        )
    # Export what `env` prints (audit log path, ...) as scripts/test would have.
    exports = subprocess.run(
        [str(TESTENV_SCRIPT), "env"], capture_output=True, text=True, check=True
    ).stdout
    for line in exports.splitlines():
        key, _, quoted = line.removeprefix("export ").partition("=")
        value = " ".join(shlex.split(quoted))
        if key.startswith("SHIPWAY_TEST_") and key != KUBECONFIG_ENV:
            os.environ.setdefault(key, value)
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def k8s_audit_log(k8s_kubeconfig: Path) -> Path:
    """The API server's audit log (JSON lines, Metadata level); skips if there is none."""
    configured = os.environ.get(AUDIT_LOG_ENV)
    if not configured or not Path(configured).is_file():
        pytest.skip(f"no audit log: ${AUDIT_LOG_ENV} is not set to a file")
    return Path(configured)


def audit_events(log: Path) -> Callable[[], list[dict[str, Any]]]:
    """A reader of the audit events written from now on, in the order written.

    The API server renames its log to ``audit-<time>.log`` when it reaches
    ``--audit-log-maxsize`` (100 MB by default) and starts a new one; a busy run crosses
    that. So the reader remembers the file it started in (its inode and offset) and, once the
    log was rotated, reads the rest of that file first, then every newer one."""
    import json

    first = log.stat()
    start = (first.st_ino, first.st_size)

    def chain() -> list[Path]:
        rotated = sorted(log.parent.glob(f"{log.stem}-*{log.suffix}"), key=lambda p: p.name)
        files = [*rotated, log]
        inodes = [p.stat().st_ino for p in files]
        if start[0] not in inodes:  # rotated away and deleted: only what is left
            return files
        return files[inodes.index(start[0]) :]

    def read() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, path in enumerate(chain()):
            with path.open("rb") as f:
                if i == 0 and os.fstat(f.fileno()).st_ino == start[0]:
                    f.seek(start[1])
                raw = f.read().decode(errors="replace")
            for line in raw.splitlines():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:  # a line still being written
                    continue
        return out

    return read


@pytest.fixture(scope="session")
def k8s_client(k8s_kubeconfig: Path) -> Iterator[Client]:
    client = Client(KubeConfig.from_file(k8s_kubeconfig), field_manager=FIELD_MANAGER)
    yield client
    client.close()


def _namespace_name(node_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"t-{base}-{uuid.uuid4().hex[:6]}"


def create_namespace(client: Client, name: str) -> str:
    """Create a namespace and wait until its default ServiceAccount exists (pods need it)."""
    client.create(
        Namespace(metadata=ObjectMeta(name=name, labels={"shipway.test/ephemeral": "true"}))
    )
    wait_for(
        client,
        ServiceAccount,
        "default",
        lambda _: True,
        namespace=name,
        timeout=60,
        what=f"the default ServiceAccount in {name}",
    )
    return name


def delete_namespace(client: Client, name: str) -> None:
    """Delete a namespace without waiting for it to be finalized."""
    try:
        client.delete(Namespace, name)
    except ApiError as error:
        if error.status.code != 404:
            raise


@pytest.fixture
def k8s_namespaces(
    k8s_client: Client, request: pytest.FixtureRequest
) -> Iterator[Callable[[], str]]:
    """A factory of fresh namespaces (``make() -> name``), all deleted after the test."""
    made: list[str] = []

    def make() -> str:
        made.append(create_namespace(k8s_client, _namespace_name(request.node.name)))
        return made[-1]

    yield make
    for name in made:
        delete_namespace(k8s_client, name)


@pytest.fixture
def k8s_namespace(k8s_namespaces: Callable[[], str]) -> str:
    """A fresh namespace (its default ServiceAccount exists, so pods are admitted)."""
    return k8s_namespaces()


MintKubeconfig = Callable[..., Path]

BROAD_RULES = [PolicyRule(apiGroups=["*"], resources=["*"], verbs=["*"])]


@pytest.fixture
def mint_kubeconfig(k8s_client: Client, tmp_path_factory: pytest.TempPathFactory) -> MintKubeconfig:
    """Returns ``mint(namespace, rules=None, *, name=None, expiration_seconds=3600) -> Path``.

    Creates a ServiceAccount, a Role in ``namespace`` (``rules``: lightkube
    ``PolicyRule`` objects or dicts; default: everything within the namespace) and a
    RoleBinding, then writes a kubeconfig with a TokenRequest token for it. The
    kubeconfig's context namespace is ``namespace``.
    """
    server = k8s_client.config.cluster.server
    ca_data = _ca_data(k8s_client)

    def mint(
        namespace: str,
        rules: list[PolicyRule] | list[dict[str, Any]] | None = None,
        *,
        name: str | None = None,
        expiration_seconds: int = 3600,
    ) -> Path:
        sa_name = name or f"shipway-test-{uuid.uuid4().hex[:6]}"
        policy: list[PolicyRule] = [
            rule if isinstance(rule, PolicyRule) else PolicyRule.from_dict(rule)  # type: ignore[misc]
            for rule in (rules if rules is not None else BROAD_RULES)
        ]
        meta = ObjectMeta(name=sa_name, namespace=namespace)
        k8s_client.create(ServiceAccount(metadata=meta))
        k8s_client.create(Role(metadata=meta, rules=policy))
        k8s_client.create(
            RoleBinding(
                metadata=meta,
                roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="Role", name=sa_name),
                subjects=[Subject(kind="ServiceAccount", name=sa_name, namespace=namespace)],
            )
        )
        token_request = k8s_client.create(
            ServiceAccount.Token(
                metadata=ObjectMeta(),
                spec=TokenRequestSpec(audiences=[], expirationSeconds=expiration_seconds),
            ),
            name=sa_name,
            namespace=namespace,
        )
        assert token_request.status is not None
        user = f"system:serviceaccount:{namespace}:{sa_name}"
        if policy:
            _wait_bound(k8s_client, user, namespace, policy[0])
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "shipway-test",
                    "cluster": {"server": server, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": user, "user": {"token": token_request.status.token}}],
            "contexts": [
                {
                    "name": "shipway-test",
                    "context": {"cluster": "shipway-test", "user": user, "namespace": namespace},
                }
            ],
            "current-context": "shipway-test",
        }
        path = tmp_path_factory.mktemp("kubeconfig") / f"{namespace}-{sa_name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    return mint


def _wait_bound(client: Client, user: str, namespace: str, rule: PolicyRule) -> None:
    """Until the API server's authorizer allows ``user`` the first thing ``rule`` grants:
    it reads Roles and RoleBindings from its own cache, which a binding just created can
    reach a moment later (a request in that moment gets 403)."""
    attributes = ResourceAttributes(
        namespace=namespace,
        group=(rule.apiGroups or [""])[0],
        resource=(rule.resources or ["*"])[0],
        verb=rule.verbs[0],
        name=(rule.resourceNames or [None])[0],
    )
    spec = SubjectAccessReviewSpec(user=user, resourceAttributes=attributes)
    review = SubjectAccessReview(spec=spec)
    deadline = time.monotonic() + 30
    while True:
        answer = client.create(review)
        if answer.status is not None and answer.status.allowed:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{user} was not allowed {attributes} within 30 s")
        time.sleep(0.1)


def _ca_data(client: Client) -> str:
    cluster = client.config.cluster
    data = getattr(cluster, "certificate_auth_data", None)
    if data:
        return str(data)
    ca_file = getattr(cluster, "certificate_auth", None)
    if ca_file:
        return base64.b64encode(Path(ca_file).read_bytes()).decode()
    raise RuntimeError("the admin kubeconfig has no certificate authority")


# --------------------------------------------------------------------------- helm peer


class HelmPeer:
    """Real Helm (v4 SDK via helm-python-sdk, no binary) against the test cluster.

    ``chart`` is a directory name under ``tests/charts`` (``"demo"``: Deployment,
    Service, ConfigMap with values ``image``, ``replicas``, ``message``; ``"worker"``:
    a second chart with the same values) or a path.
    """

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    @staticmethod
    def chart_path(chart: str | Path) -> Path:
        path = Path(chart)
        return path if path.is_absolute() else CHARTS_DIR / path

    def _config(self, namespace: str) -> Any:
        import helm_python

        return helm_python.Config(kubeconfig_path=self.kubeconfig, namespace=namespace)

    def install(
        self,
        name: str,
        namespace: str,
        *,
        chart: str | Path = "demo",
        values: dict[str, Any] | None = None,
        wait: bool = False,
        timeout: int = 120,
    ) -> dict[str, Any]:
        with self._config(namespace) as cfg:
            release: dict[str, Any] = cfg.install(
                self.chart_path(chart),
                name,
                values,
                namespace=namespace,
                wait="watcher" if wait else None,
                timeout=timeout,
            )
            return release

    def upgrade(
        self,
        name: str,
        namespace: str,
        *,
        chart: str | Path = "demo",
        values: dict[str, Any] | None = None,
        wait: bool = False,
        timeout: int = 120,
    ) -> dict[str, Any]:
        with self._config(namespace) as cfg:
            release: dict[str, Any] = cfg.upgrade(
                self.chart_path(chart),
                name,
                values,
                namespace=namespace,
                wait="watcher" if wait else None,
                timeout=timeout,
            )
            return release

    def rollback(
        self, name: str, namespace: str, *, revision: int | None = None, wait: bool = False
    ) -> None:
        with self._config(namespace) as cfg:
            cfg.rollback(name, version=revision, wait="watcher" if wait else None)

    def uninstall(self, name: str, namespace: str) -> None:
        with self._config(namespace) as cfg:
            cfg.uninstall(name, ignore_not_found=True)

    def status(self, name: str, namespace: str) -> dict[str, Any]:
        with self._config(namespace) as cfg:
            release: dict[str, Any] = cfg.status(name)
            return release

    def history(self, name: str, namespace: str) -> list[dict[str, Any]]:
        with self._config(namespace) as cfg:
            revisions: list[dict[str, Any]] = cfg.history(name)
            return revisions

    def list(self, namespace: str) -> list[dict[str, Any]]:
        with self._config(namespace) as cfg:
            releases: list[dict[str, Any]] = cfg.list(all_states=True)
            return releases


@pytest.fixture
def helm(k8s_kubeconfig: Path) -> HelmPeer:
    return HelmPeer(k8s_kubeconfig)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())
