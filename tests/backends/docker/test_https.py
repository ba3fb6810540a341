"""HTTPS on the shared proxy, against the real test ACME CA (Pebble) on both test hosts.

Every name is a fresh one under ``SHIPWAY_TEST_ACME_DOMAIN`` (Pebble resolves it to host A),
and the slots' HTTP port is the CA's HTTP-01 port (held by one test at a time). A client
that trusts ONLY the CA's issuing root (``SHIPWAY_TEST_ACME_ROOT``) fetches the app over
HTTPS and verifies the chain. The spec's ``acme.root`` is a bundle of the directory's own
TLS CA and that root: what a private CA's user gives.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import socket
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shipway import api
from shipway.backends.docker.records import read_tree
from shipway.cli.main import cli
from shipway.engine import Rolled
from shipway.plan.model import NoOp
from tests.backends.docker.conftest import SLOT, Deployment, Lines, free_port, servers_started
from tests.loops import RequestLoop
from tests.testenv.acme import AcmeEnv, challenge_port
from tests.testenv.docker import DockerEnv, DockerHost

#: how long a first certificate may take (an order by HTTP-01: about 4 s on a quiet host)
ISSUE = 90.0


@pytest.fixture
def secure(
    docker_env: DockerEnv, acme_env: AcmeEnv, ssh_env: dict[str, str], tmp_path: Path
) -> Iterator[Deployment]:
    """A fresh app whose slot's HTTP port is the CA's challenge port (this test's alone)."""
    with challenge_port(acme_env) as port:
        d = Deployment(env=docker_env, name=f"t{uuid.uuid4().hex[:8]}", dir=tmp_path, port=port)
        (tmp_path / "ca.pem").write_bytes(
            acme_env.directory_ca.read_bytes() + acme_env.root.read_bytes()
        )
        try:
            yield d
        finally:
            d.cleanup()


def acme_line(acme: AcmeEnv, profile: str | None = None) -> str:
    extra = f', profile = "{profile}"' if profile else ""
    return f'acme = {{ directory = "{acme.directory}", root = "ca.pem"{extra} }}\n'


def fetch(
    host: DockerHost, port: int, name: str, root: Path, path: str = "/version"
) -> tuple[int, dict[str, str], str, dict[str, Any]]:
    """(status, headers, body, peer certificate) of GET ``path`` for ``name`` over HTTPS,
    verified against ``root`` only; raises while no certificate verifies."""
    context = ssl.create_default_context(cafile=str(root))  # that file only
    # the host's address, the name as SNI: the certificate must be for the name
    tls = context.wrap_socket(
        socket.create_connection((host.address, port), timeout=10), server_hostname=name
    )
    cert = tls.getpeercert()
    assert cert is not None
    conn = http.client.HTTPConnection(host.address, port, timeout=10)
    conn.sock = tls
    try:
        conn.request("GET", path, headers={"Host": name})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode(), cert
    finally:
        conn.close()


def served(
    host: DockerHost, port: int, name: str, root: Path, deadline: float = ISSUE
) -> tuple[int, dict[str, str], str, dict[str, Any]]:
    """:func:`fetch`, once the host serves a certificate that verifies (polled)."""
    end = time.monotonic() + deadline
    while True:
        try:
            return fetch(host, port, name, root)
        except (ssl.SSLError, OSError):
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


def plain(host: DockerHost, port: int, name: str) -> tuple[int, dict[str, str]]:
    conn = http.client.HTTPConnection(host.address, port, timeout=10)
    try:
        conn.request("GET", "/version?x=1", headers={"Host": name})
        response = conn.getresponse()
        response.read()
        return response.status, dict(response.getheaders())
    finally:
        conn.close()


def serial(cert: dict[str, Any]) -> str:
    return str(cert["serialNumber"])


def write(
    d: Deployment, hosts: list[DockerHost], routes: str, slot_extra: str, tls_port: int
) -> None:
    d.write(hosts=hosts, extra=routes, slot_extra=f"proxy_tls_port = {tls_port}\n{slot_extra}")


def test_one_host_serves_an_acme_certificate_redirects_http_and_no_hsts_by_default(
    secure: Deployment, acme_env: AcmeEnv
) -> None:
    env, tls_port = secure.env, free_port()
    name = f"s{uuid.uuid4().hex[:8]}.{acme_env.domain}"
    route = f'[[routes]]\nhost = "{name}"\nprocess = "web"\ntls = "auto"\n'
    write(secure, [env.a], route, acme_line(acme_env), tls_port)
    plan = api.plan(secure.app(), SLOT)
    assert any(
        n.startswith(f"certificates: {name} requested from {acme_env.directory}")
        for n in plan.notes
    ), plan.notes
    assert isinstance(secure.deploy(), Rolled)

    status, headers, body, cert = served(env.a, tls_port, name, acme_env.root)
    assert (status, body) == (200, "v1\n")
    assert ("DNS", name) in cert["subjectAltName"]
    assert "Strict-Transport-Security" not in headers  # opt-in only
    # plain HTTP for that name: a redirect to HTTPS, same path
    code, headers = plain(env.a, secure.port, name)
    assert code == 308
    assert headers["Location"] == f"https://{name}:{tls_port}/version?x=1"

    # status: the certificate's names, issuer and expiry
    result = CliRunner().invoke(
        cli, ["-f", str(secure.spec_file), "status", SLOT, "-o", "json"], catch_exceptions=False
    )
    got = api.status(secure.app(), SLOT).certificates
    (mine,) = [c for c in got if name in c.names]
    assert mine.issuer.startswith("Pebble Intermediate CA")
    expected = datetime.datetime.strptime(cert["notAfter"], "%b %d %H:%M:%S %Y %Z")
    assert mine.expires.replace(tzinfo=None) == expected
    assert name in result.output


@pytest.mark.timeout(600)
def test_two_hosts_get_the_certificate_issued_once_and_renewed_without_a_deploy(
    secure: Deployment, acme_env: AcmeEnv
) -> None:
    """B (first) orders; A forwards the CA's HTTP-01 check (the name resolves to A) to B,
    and gets the certificate from B: the same serial on both; HSTS when asked. With
    Pebble's 3-minute profile, B renews on its own and both serve the new one."""
    env, tls_port = secure.env, free_port()
    name = f"r{uuid.uuid4().hex[:8]}.{acme_env.domain}"
    route = f'[[routes]]\nhost = "{name}"\nprocess = "web"\ntls = "auto"\n'
    write(secure, [env.b, env.a], route, acme_line(acme_env, "shortlived") + "hsts = true\n",
          tls_port)  # fmt: skip
    assert isinstance(secure.deploy(), Rolled)

    on_b = served(env.b, tls_port, name, acme_env.root)
    on_a = served(env.a, tls_port, name, acme_env.root)
    for status, headers, body, _ in (on_a, on_b):
        assert (status, body) == (200, "v1\n")
        assert headers["Strict-Transport-Security"] == "max-age=31536000"
    first = serial(on_b[3])
    assert serial(on_a[3]) == first, "host A must serve B's certificate, not one of its own"
    # one order: nothing in A's certificate storage, B's holds the name's certificate
    assert secure_storage(secure, env.a) == []
    assert [p for p in secure_storage(secure, env.b) if p.endswith(f"{name}.crt")]

    # renewal: no deploy; B's proxy renews before expiry, A serves the new one too
    deadline = time.monotonic() + 300
    while True:
        try:
            now_b = serial(served(env.b, tls_port, name, acme_env.root, 30)[3])
            now_a = serial(served(env.a, tls_port, name, acme_env.root, 30)[3])
        except (ssl.SSLError, OSError) as exc:
            raise AssertionError(f"{exc}; B's proxy:\n{proxy_logs(secure, env.b)}") from exc
        if now_b != first and now_a == now_b:
            break
        assert time.monotonic() < deadline, proxy_logs(secure, env.b)
        time.sleep(5)


def proxy_logs(d: Deployment, host: DockerHost) -> str:
    client = d.local(host)
    try:
        logs = client.containers.get(f"shipway-proxy-{d.port}").logs(tail=60)
        return str(logs.decode(errors="replace"))
    finally:
        client.close()


def secure_storage(d: Deployment, host: DockerHost) -> list[str]:
    """The certificate files in the host's shared proxy's storage."""
    from shipway.backends.docker.records import read_tree_of

    client = d.local(host)
    try:
        tree = read_tree_of(client, f"shipway-proxy-{d.port}", "/data/caddy/certificates")
        return sorted(tree)
    finally:
        client.close()


def self_signed(name: str, directory: Path) -> tuple[Path, Path]:
    """A certificate for ``name`` and its key (PEM files), signed by itself."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_a_certificate_from_secrets_is_served_on_both_hosts_and_never_shown(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, tls_port = deployment.env, free_port()
    name = f"g{uuid.uuid4().hex[:8]}.example.test"
    cert_file, key_file = self_signed(name, tmp_path)
    monkeypatch.setenv("SHOP_CERT", cert_file.read_text())
    monkeypatch.setenv("SHOP_KEY", key_file.read_text())
    routes = (
        '[secrets]\nSHOP_CERT = { from_env = "SHOP_CERT" }\nSHOP_KEY = { from_env = "SHOP_KEY" }\n'
        f'[[routes]]\nhost = "{name}"\nprocess = "web"\n'
        'tls = { cert = "SHOP_CERT", key = "SHOP_KEY" }\n'
    )
    write(deployment, [env.a, env.b], routes, "", tls_port)
    lines = Lines()
    plan = api.plan(deployment.app(), SLOT)
    assert f"certificate: {name} from secrets.SHOP_CERT and secrets.SHOP_KEY" in plan.notes
    assert isinstance(deployment.deploy(lines), Rolled)
    for host in (env.a, env.b):
        status, _, body, cert = served(host, tls_port, name, cert_file, 30)
        assert (status, body) == (200, "v1\n")
        assert ("DNS", name) in cert["subjectAltName"]
    got = api.status(deployment.app(), SLOT).certificates
    assert sorted(c.host for c in got if name in c.names) == sorted(
        h.name for h in deployment.backend().host_addresses
    )
    secret = key_file.read_text().splitlines()[1]
    shown = lines.text() + "\n".join(plan.describe()) + str(plan.to_json())
    assert secret not in shown
    # what the proxies' files say is what a later run observes: nothing to repair
    assert [type(s) for s in api.plan(deployment.app(), SLOT, repair=True).steps] == [NoOp]
    # each host's proxy, made for this slot, had the secure entries from its first config:
    # the route's arrival loaded no config (each server started once, at its start)
    for host in (env.a, env.b):
        (proxy,) = deployment.containers(host, kind="proxy")
        config = json.loads(read_tree(proxy, "/etc/shipway")["caddy.json"][0])
        assert servers_started(proxy) == len(config["apps"]["http"]["servers"])


def test_an_app_without_https_uses_the_proxy_an_https_app_made_as_it_is(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared proxy of an app with HTTPS (its HTTPS port, its certificate volume) serves
    an app without: that app's deploy neither replaces it nor plans to, and both serve."""
    env, tls_port = deployment.env, free_port()
    name = f"g{uuid.uuid4().hex[:8]}.example.test"
    cert_file, key_file = self_signed(name, tmp_path)
    monkeypatch.setenv("SHOP_CERT", cert_file.read_text())
    monkeypatch.setenv("SHOP_KEY", key_file.read_text())
    write(deployment, [env.a], GIVEN.format(name=name), "", tls_port)
    assert isinstance(deployment.deploy(), Rolled)
    (proxy,) = deployment.containers(env.a, kind="proxy")

    with plain_app_beside(deployment, tmp_path) as (plain_app, blog):
        again = api.plan(plain_app.app(), SLOT, image=env.images.v2)
        assert not [s for s in again.steps if getattr(s, "kind", None) == "proxy"], again.steps
        assert plain(env.a, deployment.port, blog)[0] == 200
        assert served(env.a, tls_port, name, cert_file, 30)[2] == "v1\n"
        (still,) = deployment.containers(env.a, kind="proxy")
        assert still.id == proxy.id
        # the HTTPS app goes: the proxy stays for the other, its key file kept empty
        key_files = [k for k in read_tree(still, "/etc/shipway") if k.endswith(".key")]
        assert key_files
        api.destroy(deployment.app(), SLOT, confirm=SLOT, reporter=Lines())
        tree = read_tree(still, "/etc/shipway")
        assert all(tree[k][0] == b"" for k in key_files), "a key outlived its route"
        assert plain(env.a, deployment.port, blog)[0] == 200


@contextlib.contextmanager
def plain_app_beside(d: Deployment, tmp_path: Path) -> Iterator[tuple[Deployment, str]]:
    """Another app on ``d``'s proxy port of host A, deployed, served by a plain HTTP name:
    (it, its name); cleaned up after."""
    (tmp_path / "plain").mkdir()
    app = Deployment(env=d.env, name=f"p{uuid.uuid4().hex[:8]}", dir=tmp_path / "plain",
                     port=d.port)  # fmt: skip
    try:
        blog = f"blog-{app.name}.test"
        app.write(hosts=[d.env.a], extra=f'[[routes]]\nhost = "{blog}"\nprocess = "web"\n')
        assert isinstance(app.deploy(), Rolled)
        yield app, blog
    finally:
        app.cleanup()


GIVEN = """[secrets]
SHOP_CERT = {{ from_env = "SHOP_CERT" }}
SHOP_KEY = {{ from_env = "SHOP_KEY" }}
[[routes]]
host = "{name}"
process = "web"
tls = {{ cert = "SHOP_CERT", key = "SHOP_KEY" }}
"""


def test_an_https_app_comes_switches_and_goes_beside_another_with_no_reload(
    secure: Deployment, acme_env: AcmeEnv, tmp_path: Path
) -> None:
    """Two apps with ACME names on one shared proxy, made by the first's deploy with its
    ACME settings in its first config. The first's route and then the second's first
    deploy, its switch, its stop and its destroy write only files: Caddy loads no config,
    the first fails no request over HTTPS, and the second's name is ordered, served and
    then answered as no app's."""
    env, tls_port = secure.env, free_port()
    (tmp_path / "first").mkdir()
    first = Deployment(env=env, name=f"f{uuid.uuid4().hex[:8]}", dir=tmp_path / "first",
                       port=secure.port)  # fmt: skip
    try:
        (first.dir / "ca.pem").write_bytes((secure.dir / "ca.pem").read_bytes())
        blog, shop = (f"{w}{uuid.uuid4().hex[:8]}.{acme_env.domain}" for w in ("b", "s"))
        routes = '[[routes]]\nhost = "{}"\nprocess = "web"\ntls = "auto"\n'
        write(first, [env.a], routes.format(blog), acme_line(acme_env), tls_port)
        assert isinstance(first.deploy(), Rolled)
        assert served(env.a, tls_port, blog, acme_env.root)[2] == "v1\n"
        (proxy,) = first.containers(env.a, kind="proxy")
        # made for an app with ACME names: their settings in its first config, so its own
        # route's arrival loaded none either (each server started once, at its start)
        config = json.loads(read_tree(proxy, "/etc/shipway")["caddy.json"][0])
        started = servers_started(proxy)
        assert started == len(config["apps"]["http"]["servers"])

        write(secure, [env.a], routes.format(shop), acme_line(acme_env), tls_port)
        fetch_blog = lambda _: fetch(env.a, tls_port, blog, acme_env.root)[::2]  # noqa: E731
        with RequestLoop(fetch_blog, limit=5_000) as loop:
            assert isinstance(secure.deploy(), Rolled)
            status, _, body, cert = served(env.a, tls_port, shop, acme_env.root)
            assert (status, body) == (200, "v1\n") and ("DNS", shop) in cert["subjectAltName"]
            assert isinstance(secure.deploy(image=env.images.v2), Rolled)
            assert served(env.a, tls_port, shop, acme_env.root)[2] == "v2\n"
            api.stop(secure.app(), SLOT, reporter=Lines())
            assert fetch(env.a, tls_port, shop, acme_env.root)[0] == 404
            api.destroy(secure.app(), SLOT, confirm=SLOT, reporter=Lines())
        assert servers_started(proxy) == started  # no config loaded
        failed = [a.body if a.status == 0 else str(a) for a in loop.failed("v1\n")]
        assert len(loop.answers) > 10 and failed == [], loop.answers[-5:]
        # what the proxy's files say is what a later run observes: nothing to repair
        assert [type(s) for s in api.plan(first.app(), SLOT, repair=True).steps] == [NoOp]
    finally:
        first.cleanup()


def test_plain_and_https_names_of_one_process_come_and_go_beside_another_with_no_reload(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process served by a plain name and by an HTTPS one (a certificate given by
    secrets): its plain name takes a host-name entry, its HTTPS name a secure entry, so its
    first deploy (its proxy made for it), a redeploy and its destroy beside another app
    load no config."""
    env, tls_port = deployment.env, free_port()
    name = f"m{uuid.uuid4().hex[:8]}.example.test"
    inside = f"plain-{deployment.name}.test"
    cert_file, key_file = self_signed(name, tmp_path)
    monkeypatch.setenv("SHOP_CERT", cert_file.read_text())
    monkeypatch.setenv("SHOP_KEY", key_file.read_text())
    routes = GIVEN.format(name=name) + f'[[routes]]\nhost = "{inside}"\nprocess = "web"\n'
    write(deployment, [env.a], routes, "", tls_port)
    assert isinstance(deployment.deploy(), Rolled)
    (proxy,) = deployment.containers(env.a, kind="proxy")
    config = json.loads(read_tree(proxy, "/etc/shipway")["caddy.json"][0])
    started = servers_started(proxy)
    assert started == len(config["apps"]["http"]["servers"])  # none loaded after its start
    assert name not in json.dumps(config) and inside not in json.dumps(config)
    with plain_app_beside(deployment, tmp_path) as (_, blog):
        assert plain(env.a, deployment.port, inside)[0] == 200
        assert plain(env.a, deployment.port, name)[0] == 308  # its HTTPS name: redirected
        assert served(env.a, tls_port, name, cert_file, 30)[2] == "v1\n"
        assert isinstance(deployment.deploy(image=env.images.v2), Rolled)
        assert served(env.a, tls_port, name, cert_file, 30)[2] == "v2\n"
        assert [type(s) for s in api.plan(deployment.app(), SLOT, repair=True).steps] == [NoOp]
        api.destroy(deployment.app(), SLOT, confirm=SLOT, reporter=Lines())
        assert plain(env.a, deployment.port, inside)[0] == 404
        assert plain(env.a, deployment.port, blog)[0] == 200
        # nor did the other app's arrival, the redeploy or the destroy
        assert servers_started(proxy) == started


def test_https_on_a_port_whose_proxy_another_app_made_without_it_is_refused_naming_the_fix(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared proxy made by an app without HTTPS publishes no HTTPS port. An app with
    HTTPS names on that port is refused before its release changes anything (replacing the
    proxy would interrupt the other app's requests), naming the fix; once the other app is
    gone, its deploy makes the proxy anew with the port and serves its name."""
    env, tls_port = deployment.env, free_port()
    with plain_app_beside(deployment, tmp_path) as (plain_app, blog):
        name = f"h{uuid.uuid4().hex[:8]}.example.test"
        cert_file, key_file = self_signed(name, tmp_path)
        monkeypatch.setenv("SHOP_CERT", cert_file.read_text())
        monkeypatch.setenv("SHOP_KEY", key_file.read_text())
        write(deployment, [env.a], GIVEN.format(name=name), "", tls_port)
        lines = Lines()
        outcome = deployment.deploy(lines)
        assert not isinstance(outcome, Rolled), lines.text()
        said = outcome.line() + lines.text()
        assert f"publishes no HTTPS port, this slot's HTTPS needs {tls_port}" in said, said
        assert "proxy_tls_port" in said and f"{plain_app.name}/{SLOT}" in said, said
        assert deployment.containers(env.a, kind="app") == []  # nothing of it was started
        assert plain(env.a, deployment.port, blog)[0] == 200
        api.destroy(plain_app.app(), SLOT, confirm=SLOT, reporter=Lines())
    assert isinstance(deployment.deploy(), Rolled)
    assert served(env.a, tls_port, name, cert_file, 30)[2] == "v1\n"


def test_an_acme_name_is_ordered_by_its_keeper_with_no_client(
    secure: Deployment, acme_env: AcmeEnv
) -> None:
    """No client ever asks for the name: the proxy's keeper shakes hands for it, so the
    certificate is in the issuer's storage within the keeper's interval of the deploy (the
    same handshake renews it in its window)."""
    env, tls_port = secure.env, free_port()
    name = f"k{uuid.uuid4().hex[:8]}.{acme_env.domain}"
    route = f'[[routes]]\nhost = "{name}"\nprocess = "web"\ntls = "auto"\n'
    write(secure, [env.a], route, acme_line(acme_env), tls_port)
    assert isinstance(secure.deploy(), Rolled)
    deadline = time.monotonic() + 90  # the keeper's 30 s, an order, a loaded machine
    while not [p for p in secure_storage(secure, env.a) if p.endswith(f"{name}.crt")]:
        assert time.monotonic() < deadline, proxy_logs(secure, env.a)
        time.sleep(1)
